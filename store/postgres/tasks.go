package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/internal/engine"
)

// ListTasks returns a job's tasks in task id order, and the opaque cursor of
// the next page ("" when there is none). An unknown job: warren.ErrNotFound.
func (s *Store) ListTasks(ctx context.Context, jobID string, opts store.ListTasksOpts) ([]warren.TaskRecord, string, error) {
	limit := engine.PageSize(opts.Limit)
	after := int64(-1) // the reduce task, task 0, is listed first
	if opts.Cursor != "" {
		id, err := decodeTaskCursor(opts.Cursor)
		if err != nil {
			return nil, "", err
		}
		after = id
	}
	// EXISTS: the tasks of a deleted job outlive its row until they are
	// purged, and are not listed.
	sql := `SELECT ` + taskColumns + `
		FROM tasks WHERE job_id = $1 AND task_id > $2 AND EXISTS (SELECT 1 FROM jobs WHERE id = $1)`
	args := []any{jobID, after}
	if opts.State != "" {
		args = append(args, string(opts.State))
		sql += ` AND state = $3`
	}
	args = append(args, limit+1)
	sql += ` ORDER BY task_id LIMIT $` + strconv.Itoa(len(args))

	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, "", fmt.Errorf("postgres: list tasks of job %q: %w", jobID, err)
	}
	tasks, err := pgx.CollectRows(rows, scanTaskRecord)
	if err != nil {
		return nil, "", fmt.Errorf("postgres: list tasks of job %q: %w", jobID, err)
	}
	if len(tasks) == 0 {
		exists, err := s.jobExists(ctx, s.pool, jobID)
		if err != nil {
			return nil, "", err
		}
		if !exists {
			return nil, "", notFound(jobID)
		}
	}
	if len(tasks) <= limit {
		return tasks, "", nil
	}
	tasks = tasks[:limit]
	return tasks, encodeTaskCursor(tasks[limit-1].TaskID), nil
}

// taskColumns are the columns of a task that scanTaskRecord reads.
const taskColumns = `job_id, task_id, state, attempts, worker, error, queued_at, started_at, finished_at, result, generation`

// scanTaskRecord reads a row of taskColumns.
func scanTaskRecord(row pgx.CollectableRow) (warren.TaskRecord, error) {
	var (
		t      warren.TaskRecord
		state  string
		result []byte
	)
	err := row.Scan(&t.JobID, &t.TaskID, &state, &t.Attempts, &t.Worker, &t.Error,
		&t.QueuedAt, &t.StartedAt, &t.FinishedAt, &result, &t.Generation)
	if err != nil {
		return warren.TaskRecord{}, err
	}
	t.State = warren.TaskState(state)
	t.Result = result
	t.QueuedAt, t.StartedAt, t.FinishedAt = utc(t.QueuedAt), utc(t.StartedAt), utc(t.FinishedAt)
	return t, nil
}

// ScanResults calls fn for each map task of a job (task_id > 0: never the
// reduce task) in task id order with its
// state and result, reading the rows as they arrive from the server. An
// error from fn stops the scan and is returned as it is. An unknown job:
// warren.ErrNotFound.
func (s *Store) ScanResults(ctx context.Context, jobID string, fn func(taskID int64, state warren.TaskState, result json.RawMessage) error) error {
	return s.ScanOutcomes(ctx, jobID, 0, func(o warren.TaskOutcome) error { return fn(o.TaskID, o.State, o.Result) })
}

// GetTask returns task taskID of job jobID. An unknown job or task:
// warren.ErrNotFound.
func (s *Store) GetTask(ctx context.Context, jobID string, taskID int64) (warren.TaskRecord, error) {
	// EXISTS: the tasks of a deleted job outlive its row until they are
	// purged, and are not its tasks.
	rows, err := s.pool.Query(ctx, `SELECT `+taskColumns+` FROM tasks
		WHERE job_id = $1 AND task_id = $2 AND EXISTS (SELECT 1 FROM jobs WHERE id = $1)`, jobID, taskID)
	if err != nil {
		return warren.TaskRecord{}, fmt.Errorf("postgres: task %d of job %q: %w", taskID, jobID, err)
	}
	t, err := pgx.CollectExactlyOneRow(rows, scanTaskRecord)
	if errors.Is(err, pgx.ErrNoRows) {
		return warren.TaskRecord{}, fmt.Errorf("postgres: task %d of job %q: %w", taskID, jobID, warren.ErrNotFound)
	}
	if err != nil {
		return warren.TaskRecord{}, fmt.Errorf("postgres: task %d of job %q: %w", taskID, jobID, err)
	}
	return t, nil
}

// ScanOutcomes calls fn for each map task of job jobID above after (and
// above 0: never the reduce task), in task id order, with its state,
// result and error, reading the rows as they arrive from the server. An
// error from fn stops the scan and is returned as it is. An unknown job:
// warren.ErrNotFound.
func (s *Store) ScanOutcomes(ctx context.Context, jobID string, after int64, fn func(warren.TaskOutcome) error) error {
	// EXISTS: the tasks of a deleted job outlive its row until they are
	// purged, and are not its outcomes.
	rows, err := s.pool.Query(ctx, `SELECT task_id, state, result, error FROM tasks
		WHERE job_id = $1 AND task_id > greatest($2::bigint, 0) AND EXISTS (SELECT 1 FROM jobs WHERE id = $1)
		ORDER BY task_id`, jobID, after)
	if err != nil {
		return fmt.Errorf("postgres: scan outcomes of job %q: %w", jobID, err)
	}
	defer rows.Close()
	seen := false
	for rows.Next() {
		seen = true
		var (
			o      warren.TaskOutcome
			state  string
			result []byte
		)
		if err := rows.Scan(&o.TaskID, &state, &result, &o.Error); err != nil {
			return fmt.Errorf("postgres: scan outcomes of job %q: %w", jobID, err)
		}
		o.State, o.Result = warren.TaskState(state), result
		if err := fn(o); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("postgres: scan outcomes of job %q: %w", jobID, err)
	}
	if !seen {
		exists, err := s.jobExists(ctx, s.pool, jobID)
		if err != nil {
			return err
		}
		if !exists {
			return notFound(jobID)
		}
	}
	return nil
}
