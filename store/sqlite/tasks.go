package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/internal/engine"
)

// ListTasks returns up to opts.Limit tasks of job jobID in task id order,
// optionally of one state; an unknown job wraps warren.ErrNotFound.
func (s *Store) ListTasks(ctx context.Context, jobID string, opts store.ListTasksOpts) ([]warren.TaskRecord, string, error) {
	limit := engine.PageSize(opts.Limit)
	// -1: the reduce task, task 0, is listed first.
	after, err := parseCursor(opts.Cursor, -1)
	if err != nil {
		return nil, "", fmt.Errorf("sqlite: list tasks: %w", err)
	}
	if err := s.jobExists(ctx, jobID); err != nil {
		return nil, "", fmt.Errorf("sqlite: list tasks of %s: %w", jobID, err)
	}
	query := `SELECT ` + taskColumns + ` FROM tasks WHERE job_id = ? AND task_id > ? `
	args := []any{jobID, after}
	if opts.State != "" {
		query += `AND state = ? `
		args = append(args, string(opts.State))
	}
	query += `ORDER BY task_id LIMIT ?`
	args = append(args, limit+1)
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, "", fmt.Errorf("sqlite: list tasks of %s: %w", jobID, err)
	}
	defer rows.Close()
	var tasks []warren.TaskRecord
	for rows.Next() {
		t, err := scanTask(rows, jobID)
		if err != nil {
			return nil, "", fmt.Errorf("sqlite: list tasks of %s: %w", jobID, err)
		}
		tasks = append(tasks, t)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("sqlite: list tasks of %s: %w", jobID, err)
	}
	if len(tasks) <= limit {
		return tasks, "", nil
	}
	return tasks[:limit], strconv.FormatInt(tasks[limit-1].TaskID, 10), nil
}

// taskColumns are the columns of a task that scanTask reads.
const taskColumns = `task_id, state, attempts, worker, error, queued_at, started_at, finished_at, result, generation`

// scanTask reads a row of taskColumns of job jobID's.
func scanTask(row interface{ Scan(...any) error }, jobID string) (warren.TaskRecord, error) {
	t := warren.TaskRecord{JobID: jobID}
	var (
		state                     string
		queued, started, finished sql.NullInt64
		result                    []byte
	)
	if err := row.Scan(&t.TaskID, &state, &t.Attempts, &t.Worker, &t.Error, &queued, &started, &finished, &result, &t.Generation); err != nil {
		return warren.TaskRecord{}, err
	}
	t.State = warren.TaskState(state)
	t.QueuedAt, t.StartedAt, t.FinishedAt = timeOf(queued), timeOf(started), timeOf(finished)
	t.Result = nilIfEmpty(result)
	return t, nil
}

// GetTask returns task taskID of job jobID; an unknown job or task wraps
// warren.ErrNotFound.
func (s *Store) GetTask(ctx context.Context, jobID string, taskID int64) (warren.TaskRecord, error) {
	// EXISTS: the tasks of a deleted job outlive its row until they are
	// purged, and are not its tasks.
	t, err := scanTask(s.r.QueryRowContext(ctx, `SELECT `+taskColumns+` FROM tasks
		WHERE job_id = ?1 AND task_id = ?2 AND EXISTS (SELECT 1 FROM jobs WHERE id = ?1)`, jobID, taskID), jobID)
	if errors.Is(err, sql.ErrNoRows) {
		return warren.TaskRecord{}, fmt.Errorf("sqlite: task %d of job %s: %w", taskID, jobID, warren.ErrNotFound)
	}
	if err != nil {
		return warren.TaskRecord{}, fmt.Errorf("sqlite: task %d of job %s: %w", taskID, jobID, err)
	}
	return t, nil
}

// JobErrors returns up to limit failed tasks of job jobID with their
// errors, in task id order; limit <= 0 means store.DefaultPageSize. An
// unknown job wraps warren.ErrNotFound.
func (s *Store) JobErrors(ctx context.Context, jobID string, limit int) ([]warren.TaskError, error) {
	// The tasks of a deleted job outlive its row until they are purged:
	// they are not its errors.
	rows, err := s.r.QueryContext(ctx, `SELECT task_id, error FROM tasks
		WHERE job_id = ?1 AND state = 'failed' AND EXISTS (SELECT 1 FROM jobs WHERE id = ?1)
		ORDER BY task_id LIMIT ?2`, jobID, engine.PageSize(limit))
	if err != nil {
		return nil, fmt.Errorf("sqlite: errors of job %s: %w", jobID, err)
	}
	defer rows.Close()
	var errs []warren.TaskError
	for rows.Next() {
		var e warren.TaskError
		if err := rows.Scan(&e.TaskID, &e.Error); err != nil {
			return nil, fmt.Errorf("sqlite: errors of job %s: %w", jobID, err)
		}
		errs = append(errs, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: errors of job %s: %w", jobID, err)
	}
	// Only an empty answer needs the job looked up: the query read only
	// the tasks of an existing job.
	if len(errs) == 0 {
		if err := s.jobExists(ctx, jobID); err != nil {
			return nil, fmt.Errorf("sqlite: errors of job %s: %w", jobID, err)
		}
	}
	return errs, nil
}

// cancelUnfinished moves the pending and queued tasks of job id to
// cancelled.
func cancelUnfinished(ctx context.Context, tx *sql.Tx, id string, at time.Time) error {
	_, err := tx.ExecContext(ctx, `UPDATE tasks SET state = 'cancelled', finished_at = ?
		WHERE job_id = ? AND state IN ('pending', 'queued')`, at.UnixMicro(), id)
	return err
}
