package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	then_spec, next_job, previous_job, max_concurrency, spawned_tasks, published_at, last_finished_at, paused_at`

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
		&then, &j.NextJob, &j.PreviousJob, &j.Policy.MaxConcurrency, &j.SpawnedTasks, &j.PublishedAt, &j.LastFinishedAt, &j.PausedAt}
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
	j.PublishedAt = utc(j.PublishedAt)
	j.LastFinishedAt = utc(j.LastFinishedAt)
	j.FinishedAt = utc(j.FinishedAt)
	j.PausedAt = utc(j.PausedAt)
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

// ListJobs returns jobs newest first (by creation time, then id),
// filtered as opts says (store.ListJobsOpts), and the opaque cursor of
// the next page ("" when there is none). An invalid search text is an
// error.
//
// A search is tried first on the engine.SearchRecentRows newest jobs the
// other filters keep (a walk of the creation index that a common text
// fills a page from), and, when they do not fill a page, through the
// indexes: the id's text_pattern_ops index for the prefix and, where
// pg_trgm is installed (migration 0025), the trigram indexes of the
// jobs' search_text and error and of the tasks' errors for the
// substrings, which cost what the matches do; without pg_trgm it scans
// them (docs/store.md). Both match a job alike.
func (s *Store) ListJobs(ctx context.Context, opts store.ListJobsOpts) ([]warren.Job, string, error) {
	if err := store.ValidateSearch(opts.Search); err != nil {
		return nil, "", fmt.Errorf("postgres: list jobs: %w", err)
	}
	var cursor *jobCursor
	if opts.Cursor != "" {
		c, err := decodeJobCursor(opts.Cursor)
		if err != nil {
			return nil, "", err
		}
		cursor = &c
	}
	limit := engine.PageSize(opts.Limit)
	if opts.Search != "" {
		q := newJobQuery(opts, cursor)
		jobs, err := s.listJobs(ctx, q.recentSearch(limit+1), q.args)
		if err != nil {
			return nil, "", err
		}
		if len(jobs) > limit {
			return jobPage(jobs, limit)
		}
	}
	q := newJobQuery(opts, cursor)
	jobs, err := s.listJobs(ctx, q.search(limit+1), q.args)
	if err != nil {
		return nil, "", err
	}
	return jobPage(jobs, limit)
}

// listJobs runs a query of jobColumns.
func (s *Store) listJobs(ctx context.Context, sql string, args []any) ([]warren.Job, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list jobs: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (warren.Job, error) { return scanJob(row) })
	if err != nil {
		return nil, fmt.Errorf("postgres: list jobs: %w", err)
	}
	return jobs, nil
}

// jobPage returns the first limit of jobs, read with one more than a
// page, and the cursor after them ("" when there was no more).
func jobPage(jobs []warren.Job, limit int) ([]warren.Job, string, error) {
	if len(jobs) <= limit {
		return jobs, "", nil
	}
	jobs = jobs[:limit]
	last := jobs[limit-1]
	return jobs, encodeJobCursor(jobCursor{createdAt: last.CreatedAt, id: last.ID}), nil
}

// jobQuery builds ListJobs' statements: the filters and cursor as
// conditions on jobs, and the search's matches of a row.
type jobQuery struct {
	where []string
	args  []any
	// match is the search's condition on a jobs row ("" without one),
	// of the placeholders of the id prefix, the lowercase substring and
	// the substring.
	match                  string
	prefix, lower, pattern string
}

func newJobQuery(opts store.ListJobsOpts, cursor *jobCursor) *jobQuery {
	q := &jobQuery{}
	if opts.State != "" {
		q.where = append(q.where, "state = "+q.arg(string(opts.State)))
	}
	if opts.Type != "" {
		q.where = append(q.where, "type = "+q.arg(opts.Type))
	}
	if opts.Queue != "" {
		q.where = append(q.where, "queue = ANY("+q.arg(engine.QueueValues(opts.Queue))+")")
	}
	if !opts.CreatedAfter.IsZero() {
		q.where = append(q.where, "created_at >= "+q.arg(opts.CreatedAfter))
	}
	if !opts.CreatedBefore.IsZero() {
		q.where = append(q.where, "created_at < "+q.arg(opts.CreatedBefore))
	}
	if cursor != nil {
		q.where = append(q.where, "(created_at, id) < ("+q.arg(cursor.createdAt)+", "+q.arg(cursor.id)+")")
	}
	if opts.Search != "" {
		// search_text is stored lowercase (engine.SearchText): LIKE,
		// which compares bytes, is several times cheaper than ILIKE,
		// which lowers every row it reads.
		prefix := q.arg(engine.PrefixPattern(opts.Search))
		lower, pattern := q.arg(engine.SearchPattern(engine.SearchLower(opts.Search))), q.arg(engine.SearchPattern(opts.Search))
		q.match = `(id LIKE ` + prefix + ` OR search_text LIKE ` + lower + ` OR error ILIKE ` + pattern + `
			OR id IN (SELECT job_id FROM tasks WHERE error <> '' AND error ILIKE ` + pattern + `))`
		q.prefix, q.lower, q.pattern = prefix, lower, pattern
	}
	return q
}

// arg adds a parameter and returns its placeholder.
func (q *jobQuery) arg(v any) string {
	q.args = append(q.args, v)
	return "$" + strconv.Itoa(len(q.args))
}

// filters returns the filters' WHERE clause, with the extra conditions.
func (q *jobQuery) filters(extra ...string) string {
	conds := append(slices.Clone(q.where), extra...)
	if len(conds) == 0 {
		return ""
	}
	return ` WHERE ` + strings.Join(conds, ` AND `)
}

// search returns the statement of up to n jobs, newest first, that the
// filters keep and the search (if any) finds, through the indexes of
// each thing it matches.
func (q *jobQuery) search(n int) string {
	var extra []string
	if q.match != "" {
		extra = append(extra, `id IN (
			SELECT id FROM jobs WHERE id LIKE `+q.prefix+`
			UNION ALL SELECT id FROM jobs WHERE search_text LIKE `+q.lower+` OR error ILIKE `+q.pattern+`
			UNION ALL SELECT job_id FROM tasks WHERE error <> '' AND error ILIKE `+q.pattern+`)`)
	}
	return `SELECT ` + jobColumns + ` FROM jobs` + q.filters(extra...) +
		` ORDER BY created_at DESC, id DESC LIMIT ` + q.arg(n)
}

// recentSearch returns the statement of up to n jobs, newest first,
// that the search finds among the engine.SearchRecentRows newest jobs
// the filters keep.
func (q *jobQuery) recentSearch(n int) string {
	return `SELECT ` + jobColumns + ` FROM (SELECT * FROM jobs` + q.filters() +
		` ORDER BY created_at DESC, id DESC LIMIT ` + q.arg(engine.SearchRecentRows) + `) AS jobs
		WHERE ` + q.match + ` ORDER BY created_at DESC, id DESC LIMIT ` + q.arg(n)
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
