package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// jobColumns is the column list scanJob reads, in its order.
const jobColumns = `id, type, state, expected_tasks, completed_tasks, failed_tasks,
	reduce, max_retries, tolerated_failures, tolerated_failure_percent, fail_fast, task_timeout_ms,
	batch_size, priority, queue, retention_ms, metadata, coalesce(idempotency_key, ''), created_at, started_at, finished_at,
	result_location, error, webhook_url, version, trace_parent, trace_state`

// scanJob reads one row of jobColumns, then into extra the columns that
// follow them.
func scanJob(row pgx.Row, extra ...any) (warren.Job, error) {
	var (
		j           warren.Job
		state       string
		timeoutMS   int64
		retentionMS int64
		metadata    []byte
	)
	dest := []any{&j.ID, &j.Type, &state, &j.ExpectedTasks, &j.CompletedTasks, &j.FailedTasks,
		&j.Policy.Reduce, &j.Policy.MaxRetries, &j.Policy.ToleratedFailures, &j.Policy.ToleratedFailurePercent, &j.Policy.FailFast,
		&timeoutMS, &j.Policy.BatchSize, &j.Policy.Priority, &j.Policy.Queue, &retentionMS, &metadata, &j.IdempotencyKey, &j.CreatedAt, &j.StartedAt, &j.FinishedAt,
		&j.ResultLocation, &j.Error, &j.WebhookURL, &j.Version, &j.TraceParent, &j.TraceState}
	err := row.Scan(append(dest, extra...)...)
	if err != nil {
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

// CreateJob writes the job row and its tasks in one transaction. The tasks
// are streamed into the table with COPY as tasks yields them, so a job of
// any size is never held in memory. An error from tasks rolls everything
// back and is returned as it is. A job whose idempotency key is taken
// (possibly by another server at the same moment) is returned with created
// false, and tasks is not consumed. A job whose id is taken is an error
// wrapping warren.ErrConflict, and so is the id of a deleted job whose
// tasks are not purged yet. An invalid spec (store.ValidateNewJob) is an
// error before anything is read or written.
func (s *Store) CreateJob(ctx context.Context, spec store.NewJob, tasks iter.Seq2[json.RawMessage, error]) (warren.Job, bool, error) {
	if err := store.ValidateNewJob(spec); err != nil {
		return warren.Job{}, false, fmt.Errorf("postgres: create job: %w", err)
	}
	id := spec.ID
	if id == "" {
		id = ulid.Make().String()
	} else if err := s.checkNotDeleted(ctx, id); err != nil {
		return warren.Job{}, false, err
	}

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return warren.Job{}, false, fmt.Errorf("postgres: create job: %w", err)
	}
	defer rollback(ctx, tx)

	p := spec.Policy
	var webhook store.Webhook
	if spec.Webhook != nil {
		webhook = *spec.Webhook
	}
	// ON CONFLICT waits for a concurrent insert of the same key to commit or
	// roll back, so two servers racing on one key never both create a job.
	var inserted string
	err = tx.QueryRow(ctx, `
		INSERT INTO jobs (id, type, state, reduce, max_retries, tolerated_failures,
			tolerated_failure_percent, fail_fast, task_timeout_ms, batch_size, retention_ms, metadata, idempotency_key, created_at, request_hash, priority, queue,
			webhook_url, webhook_secret)
		VALUES ($1, $2, 'pending', $3, $4, $5, $6, $7, $8, $12, $14, $9, NULLIF($10, ''), $11, $13, $15, $16, $17, $18)
		ON CONFLICT (idempotency_key) DO NOTHING
		RETURNING id`,
		id, spec.Type, p.Reduce, p.MaxRetries, p.ToleratedFailures,
		p.ToleratedFailurePercent, p.FailFast, p.TaskTimeout.Milliseconds(), []byte(spec.Metadata), spec.IdempotencyKey, s.clock(), p.BatchSize,
		spec.RequestHash, p.Retention.Milliseconds(), p.Priority, p.Queue, webhook.URL, webhook.Secret,
	).Scan(&inserted)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		rollback(ctx, tx)
		job, err := s.replayOf(ctx, spec)
		return job, false, err
	case isUniqueViolation(err, "jobs_pkey"):
		return warren.Job{}, false, fmt.Errorf("postgres: create job %q: %w: a job with that id exists", id, warren.ErrConflict)
	case err != nil:
		return warren.Job{}, false, fmt.Errorf("postgres: create job: %w", err)
	}

	n, err := copyTasks(ctx, tx, id, tasks)
	if isUniqueViolation(err, "tasks_pkey") {
		// The tasks of a job of this id, deleted since checkNotDeleted
		// looked, are not purged yet.
		return warren.Job{}, false, fmt.Errorf("postgres: create job %q: %w: a deleted job of that id still has tasks", id, warren.ErrConflict)
	}
	if err != nil {
		return warren.Job{}, false, err
	}
	job, err := scanJob(tx.QueryRow(ctx, `UPDATE jobs SET expected_tasks = $2, trace_parent = $3, trace_state = $4 WHERE id = $1 RETURNING `+jobColumns,
		id, n, spec.TraceParent, spec.TraceState))
	if err != nil {
		return warren.Job{}, false, fmt.Errorf("postgres: create job: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return warren.Job{}, false, fmt.Errorf("postgres: create job: commit: %w", err)
	}
	return job, true, nil
}

// copyTasks streams the tasks of job id into the tasks table and returns how
// many it wrote. An error yielded by tasks is returned unwrapped.
func copyTasks(ctx context.Context, tx pgx.Tx, id string, tasks iter.Seq2[json.RawMessage, error]) (int64, error) {
	next, stop := iter.Pull2(tasks)
	defer stop()
	src := &taskSource{next: next, row: []any{id, int64(0), string(warren.TaskPending), nil}}
	n, err := tx.CopyFrom(ctx, pgx.Identifier{"tasks"}, []string{"job_id", "task_id", "state", "payload"}, src)
	// CopyFrom has waited for its reader goroutine, so src.err is safe to read.
	if src.err != nil {
		return 0, src.err
	}
	if err != nil {
		return 0, fmt.Errorf("postgres: create job: write tasks: %w", err)
	}
	return n, nil
}

// taskSource feeds COPY one task row at a time from the caller's iterator.
// row holds the job id and state once; Values fills in the rest.
type taskSource struct {
	next    func() (json.RawMessage, error, bool)
	taskID  int64
	payload []byte
	row     []any
	err     error
}

// Next advances to the next payload; it stops at the end or at an error.
func (s *taskSource) Next() bool {
	payload, err, ok := s.next()
	if !ok {
		return false
	}
	if err != nil {
		s.err = err
		return false
	}
	s.taskID++
	s.payload = payload
	return true
}

// Values returns the current row. pgx encodes it before calling Next
// again, so reusing the slice is safe.
func (s *taskSource) Values() ([]any, error) {
	s.row[1], s.row[3] = s.taskID, s.payload
	return s.row, nil
}

// Err returns the error the iterator yielded, if any.
func (s *taskSource) Err() error { return s.err }

// checkNotDeleted refuses the explicit id of a new job when a deleted job
// of that id still has tasks to purge: the new job's tasks would collide
// with them. A generated id is never a deleted job's.
func (s *Store) checkNotDeleted(ctx context.Context, id string) error {
	var deleted bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM deleted_jobs WHERE job_id = $1)`, id).Scan(&deleted); err != nil {
		return fmt.Errorf("postgres: create job %q: %w", id, err)
	}
	if deleted {
		return fmt.Errorf("postgres: create job %q: %w: a deleted job of that id still has tasks to purge", id, warren.ErrConflict)
	}
	return nil
}

// replayOf returns the job spec's idempotency key names, as store.Replay
// decides.
func (s *Store) replayOf(ctx context.Context, spec store.NewJob) (warren.Job, error) {
	var hash string
	job, err := scanJob(s.pool.QueryRow(ctx, `SELECT `+jobColumns+`, request_hash FROM jobs WHERE idempotency_key = $1`, spec.IdempotencyKey), &hash)
	if err != nil {
		return warren.Job{}, fmt.Errorf("postgres: job with idempotency key %q: %w", spec.IdempotencyKey, err)
	}
	job, err = store.Replay(job, hash, spec)
	if err != nil {
		return warren.Job{}, fmt.Errorf("postgres: create job: %w", err)
	}
	return job, nil
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
	limit := store.PageSize(opts.Limit)
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

// JobErrors returns up to limit failed tasks of a job with their errors, in
// task id order. limit <= 0 means store.DefaultPageSize. An unknown job:
// warren.ErrNotFound.
func (s *Store) JobErrors(ctx context.Context, jobID string, limit int) ([]warren.TaskError, error) {
	// The tasks of a deleted job outlive its row until they are purged:
	// they are not its errors.
	rows, err := s.pool.Query(ctx, `
		SELECT task_id, error FROM tasks
		WHERE job_id = $1 AND state = 'failed' AND EXISTS (SELECT 1 FROM jobs WHERE id = $1)
		ORDER BY task_id LIMIT $2`, jobID, store.PageSize(limit))
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
