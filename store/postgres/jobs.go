package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/internal/engine"
	"github.com/warrenhq/warren/store/internal/sqlstore"
)

// jobColumns is the column list scanJob reads, in its order.
const jobColumns = `id, type, state, expected_tasks, completed_tasks, failed_tasks,
	reduce, max_retries, tolerated_failures, tolerated_failure_percent, fail_fast, task_timeout_ms,
	batch_size, priority, queue, retention_ms, metadata, coalesce(idempotency_key, ''), created_at, started_at, finished_at,
	result_location, error, webhook_url, version, trace_parent, trace_state, reduce_task, reduce_state,
	then_spec, next_job, previous_job, max_concurrency, spawned_tasks`

// scanJob reads one row of jobColumns, then into extra the columns that
// follow them.
func scanJob(row pgx.Row, extra ...any) (warren.Job, error) {
	var (
		j           warren.Job
		state       string
		timeoutMS   int64
		retentionMS int64
		metadata    []byte
		reduceTask  []byte
		then        []byte
	)
	dest := []any{&j.ID, &j.Type, &state, &j.ExpectedTasks, &j.CompletedTasks, &j.FailedTasks,
		&j.Policy.Reduce, &j.Policy.MaxRetries, &j.Policy.ToleratedFailures, &j.Policy.ToleratedFailurePercent, &j.Policy.FailFast,
		&timeoutMS, &j.Policy.BatchSize, &j.Policy.Priority, &j.Policy.Queue, &retentionMS, &metadata, &j.IdempotencyKey, &j.CreatedAt, &j.StartedAt, &j.FinishedAt,
		&j.ResultLocation, &j.Error, &j.WebhookURL, &j.Version, &j.TraceParent, &j.TraceState, &reduceTask, &j.ReduceState,
		&then, &j.NextJob, &j.PreviousJob, &j.Policy.MaxConcurrency, &j.SpawnedTasks}
	err := row.Scan(append(dest, extra...)...)
	if err != nil {
		return warren.Job{}, err
	}
	if j.Policy.ReduceTask, err = sqlstore.DecodeReduceTask(reduceTask); err != nil {
		return warren.Job{}, err
	}
	if j.Then, err = sqlstore.DecodeThen(then); err != nil {
		return warren.Job{}, err
	}
	j.State = warren.JobState(state)
	j.Policy.TaskTimeout = time.Duration(timeoutMS) * time.Millisecond
	j.Policy.Retention = time.Duration(retentionMS) * time.Millisecond
	j.Metadata = metadata
	j.CreatedAt = j.CreatedAt.UTC()
	j.StartedAt = utc(j.StartedAt)
	j.FinishedAt = utc(j.FinishedAt)
	return j, nil
}

// GetJob returns one job, or an error wrapping warren.ErrNotFound.
func (s *Store) GetJob(ctx context.Context, id string) (warren.Job, error) {
	job, err := scanJob(s.pool.QueryRow(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return warren.Job{}, notFound(id)
	}
	if err != nil {
		return warren.Job{}, fmt.Errorf("postgres: get job %q: %w", id, err)
	}
	return job, nil
}

// ListJobs returns jobs newest first (by creation time, then id), and the
// opaque cursor of the next page ("" when there is none).
func (s *Store) ListJobs(ctx context.Context, opts store.ListJobsOpts) ([]warren.Job, string, error) {
	limit := engine.PageSize(opts.Limit)
	var (
		where []string
		args  []any
	)
	if opts.State != "" {
		args = append(args, string(opts.State))
		where = append(where, fmt.Sprintf("state = $%d", len(args)))
	}
	if opts.Type != "" {
		args = append(args, opts.Type)
		where = append(where, fmt.Sprintf("type = $%d", len(args)))
	}
	if opts.Cursor != "" {
		c, err := decodeJobCursor(opts.Cursor)
		if err != nil {
			return nil, "", err
		}
		args = append(args, c.createdAt, c.id)
		where = append(where, fmt.Sprintf("(created_at, id) < ($%d, $%d)", len(args)-1, len(args)))
	}
	sql := `SELECT ` + jobColumns + ` FROM jobs`
	if len(where) > 0 {
		sql += ` WHERE ` + strings.Join(where, ` AND `)
	}
	args = append(args, limit+1)
	sql += ` ORDER BY created_at DESC, id DESC LIMIT $` + strconv.Itoa(len(args))

	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, "", fmt.Errorf("postgres: list jobs: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (warren.Job, error) { return scanJob(row) })
	if err != nil {
		return nil, "", fmt.Errorf("postgres: list jobs: %w", err)
	}
	if len(jobs) <= limit {
		return jobs, "", nil
	}
	jobs = jobs[:limit]
	last := jobs[limit-1]
	return jobs, encodeJobCursor(jobCursor{createdAt: last.CreatedAt, id: last.ID}), nil
}

// JobResult returns a closed job's stored reduced result. A job without one:
// warren.ErrNotFound.
func (s *Store) JobResult(ctx context.Context, jobID string) ([]byte, error) {
	var data []byte
	err := s.pool.QueryRow(ctx, `SELECT data FROM job_results WHERE job_id = $1`, jobID).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("postgres: result of job %q: %w", jobID, warren.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: result of job %q: %w", jobID, err)
	}
	return data, nil
}

// JobResultRange implements store.Store. substring of a bytea detoasts
// only the slice it needs when the value is stored uncompressed, and at
// worst decompresses it in the database, never in this process.
func (s *Store) JobResultRange(ctx context.Context, jobID string, off, n int64) ([]byte, int64, error) {
	if off < 0 || n < 0 {
		return nil, 0, fmt.Errorf("postgres: result of job %q: range %d+%d is negative", jobID, off, n)
	}
	var (
		chunk []byte
		size  int64
	)
	err := s.pool.QueryRow(ctx, `SELECT octet_length(data), substring(data from $2 for $3) FROM job_results WHERE job_id = $1`,
		jobID, off+1, n).Scan(&size, &chunk)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, 0, fmt.Errorf("postgres: result of job %q: %w", jobID, warren.ErrNotFound)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("postgres: result of job %q: %w", jobID, err)
	}
	if chunk == nil {
		chunk = []byte{}
	}
	return chunk, size, nil
}

// JobErrors returns up to limit failed tasks of a job with their errors, in
// task id order. limit <= 0 means store.DefaultPageSize. An unknown job:
// warren.ErrNotFound.
func (s *Store) JobErrors(ctx context.Context, jobID string, limit int) ([]warren.TaskError, error) {
	// The tasks of a deleted job outlive its row until they are purged:
	// they are not its errors.
	rows, err := s.pool.Query(ctx, `
		SELECT task_id, error FROM tasks
		WHERE job_id = $1 AND state = 'failed' AND EXISTS (SELECT 1 FROM jobs WHERE id = $1)
		ORDER BY task_id LIMIT $2`, jobID, engine.PageSize(limit))
	if err != nil {
		return nil, fmt.Errorf("postgres: errors of job %q: %w", jobID, err)
	}
	errs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (warren.TaskError, error) {
		var te warren.TaskError
		err := row.Scan(&te.TaskID, &te.Error)
		return te, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: errors of job %q: %w", jobID, err)
	}
	if len(errs) == 0 {
		exists, err := s.jobExists(ctx, s.pool, jobID)
		if err != nil {
			return nil, err
		}
		if !exists {
			return nil, notFound(jobID)
		}
	}
	return errs, nil
}
