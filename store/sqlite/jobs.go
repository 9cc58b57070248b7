package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/internal/engine"
	"github.com/warrenhq/warren/store/internal/sqlstore"
)

// GetJob returns the job with id, or an error wrapping warren.ErrNotFound.
func (s *Store) GetJob(ctx context.Context, id string) (warren.Job, error) {
	j, err := getJob(ctx, s.r, "id = ?", id)
	if err != nil {
		return warren.Job{}, fmt.Errorf("sqlite: get job %s: %w", id, err)
	}
	return j, nil
}

const jobColumns = `id, type, state, expected_tasks, completed_tasks, failed_tasks, reduce, max_retries,
	tolerated_failures, tolerated_failure_percent, fail_fast, task_timeout_ms, batch_size, priority, queue, retention_ms, metadata, COALESCE(idempotency_key, ''),
	created_at, started_at, finished_at, result_location, error, webhook_url, version, trace_parent, trace_state,
	reduce_task, reduce_state, then_spec, next_job, previous_job, max_concurrency, spawned_tasks, published_at, last_finished_at, paused_at, seq`

// getJob returns the one job matching where, or warren.ErrNotFound.
func getJob(ctx context.Context, q querier, where string, args ...any) (warren.Job, error) {
	j, _, err := scanJob(q.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE `+where, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return warren.Job{}, warren.ErrNotFound
	}
	return j, err
}

// scanJob reads a row of jobColumns: the job and its seq.
func scanJob(row interface{ Scan(...any) error }) (warren.Job, int64, error) {
	var (
		j                 warren.Job
		state             string
		metadata          []byte
		created, seq      int64
		timeoutMS         int64
		retentionMS       int64
		started, finished sql.NullInt64
		published, last   sql.NullInt64
		paused            sql.NullInt64
		reduceTask        []byte
		then              []byte
	)
	err := row.Scan(&j.ID, &j.Type, &state, &j.ExpectedTasks, &j.CompletedTasks, &j.FailedTasks,
		&j.Policy.Reduce, &j.Policy.MaxRetries, &j.Policy.ToleratedFailures, &j.Policy.ToleratedFailurePercent,
		&j.Policy.FailFast, &timeoutMS, &j.Policy.BatchSize, &j.Policy.Priority, &j.Policy.Queue, &retentionMS, &metadata, &j.IdempotencyKey, &created, &started, &finished,
		&j.ResultLocation, &j.Error, &j.WebhookURL, &j.Version, &j.TraceParent, &j.TraceState,
		&reduceTask, &j.ReduceState, &then, &j.NextJob, &j.PreviousJob, &j.Policy.MaxConcurrency, &j.SpawnedTasks, &published, &last, &paused, &seq)
	if err != nil {
		return warren.Job{}, 0, err
	}
	if j.Policy.ReduceTask, err = sqlstore.DecodeReduceTask(reduceTask); err != nil {
		return warren.Job{}, 0, err
	}
	if j.Then, err = sqlstore.DecodeThen(then); err != nil {
		return warren.Job{}, 0, err
	}
	j.State = warren.JobState(state)
	j.Policy.TaskTimeout = time.Duration(timeoutMS) * time.Millisecond
	j.Policy.Retention = time.Duration(retentionMS) * time.Millisecond
	j.Metadata = nilIfEmpty(metadata)
	j.CreatedAt = *timeOf(sql.NullInt64{Int64: created, Valid: true})
	j.StartedAt = timeOf(started)
	j.PublishedAt = timeOf(published)
	j.LastFinishedAt = timeOf(last)
	j.FinishedAt = timeOf(finished)
	j.PausedAt = timeOf(paused)
	return j, seq, nil
}

// ListJobs returns up to opts.Limit jobs newest first (creation order),
// filtered as opts says (store.ListJobsOpts). The cursor is opaque; a
// malformed one is an error, and so is an invalid search text.
//
// A search is tried first on the engine.SearchRecentRows newest jobs the
// other filters keep, asking the trigram indexes (FTS5) only about their
// range of seq, and, when they do not fill a page, on every job: the
// trigram indexes of job_search and task_error_search for the
// substrings and the id index for the prefix, which cost what the
// matches do, not what the jobs do (docs/store.md).
func (s *Store) ListJobs(ctx context.Context, opts store.ListJobsOpts) ([]warren.Job, string, error) {
	if err := store.ValidateSearch(opts.Search); err != nil {
		return nil, "", fmt.Errorf("sqlite: list jobs: %w", err)
	}
	limit := engine.PageSize(opts.Limit)
	before, err := parseCursor(opts.Cursor, math.MaxInt64)
	if err != nil {
		return nil, "", fmt.Errorf("sqlite: list jobs: %w", err)
	}
	where, args := jobFilters(opts, before)
	if opts.Search == "" {
		return s.jobPage(ctx, `SELECT `+jobColumns+` FROM jobs WHERE `+where+` ORDER BY seq DESC LIMIT ?`,
			append(args, limit+1), limit)
	}
	// The id prefix as a range of the id index: BINARY ordering puts
	// every id that starts with the text between it and it followed by
	// the last code point. lo is the least seq the matches may have.
	phrase := engine.FTSPhrase(opts.Search)
	match := func(lo string) string {
		return `(id >= ? AND id < ? || char(1114111)
			OR seq IN (SELECT rowid FROM job_search WHERE job_search MATCH ? AND rowid >= ` + lo + `)
			OR seq IN (SELECT rowid / 4294967296 FROM task_error_search
				WHERE task_error_search MATCH ? AND rowid >= ` + lo + ` * 4294967296))`
	}
	matchArgs := []any{opts.Search, opts.Search, phrase, phrase}
	recent := `WITH recent AS (SELECT seq FROM jobs WHERE ` + where + ` ORDER BY seq DESC LIMIT ?)
		SELECT ` + jobColumns + ` FROM jobs WHERE seq IN (SELECT seq FROM recent) AND ` +
		match(`(SELECT coalesce(min(seq), 0) FROM recent)`) + ` ORDER BY seq DESC LIMIT ?`
	jobs, next, err := s.jobPage(ctx, recent, slices.Concat(args, []any{engine.SearchRecentRows}, matchArgs, []any{limit + 1}), limit)
	if err != nil || next != "" {
		return jobs, next, err
	}
	// On every job, the matches as one set, which the planner reads
	// from the indexes (an OR of them would have it scan the jobs).
	return s.jobPage(ctx, `SELECT `+jobColumns+` FROM jobs WHERE `+where+` AND seq IN (
			SELECT seq FROM jobs WHERE id >= ? AND id < ? || char(1114111)
			UNION ALL SELECT rowid FROM job_search WHERE job_search MATCH ?
			UNION ALL SELECT rowid / 4294967296 FROM task_error_search WHERE task_error_search MATCH ?)
		ORDER BY seq DESC LIMIT ?`, slices.Concat(args, matchArgs, []any{limit + 1}), limit)
}

// jobFilters returns the conditions of opts' filters but the search,
// and their arguments, for jobs before seq before.
func jobFilters(opts store.ListJobsOpts, before int64) (string, []any) {
	where := `seq < ?`
	args := []any{before}
	if opts.State != "" {
		where += ` AND state = ?`
		args = append(args, string(opts.State))
	}
	if opts.Type != "" {
		where += ` AND type = ?`
		args = append(args, opts.Type)
	}
	if opts.Queue != "" {
		queues := engine.QueueValues(opts.Queue)
		where += ` AND queue IN (?` + strings.Repeat(`, ?`, len(queues)-1) + `)`
		for _, q := range queues {
			args = append(args, q)
		}
	}
	if !opts.CreatedAfter.IsZero() {
		where += ` AND created_at >= ?`
		args = append(args, opts.CreatedAfter.UnixMicro())
	}
	if !opts.CreatedBefore.IsZero() {
		where += ` AND created_at < ?`
		args = append(args, opts.CreatedBefore.UnixMicro())
	}
	return where, args
}

// jobPage runs query, which reads jobColumns of up to limit+1 jobs, and
// returns the first limit and the cursor after them ("" when there was
// no more).
func (s *Store) jobPage(ctx context.Context, query string, args []any, limit int) ([]warren.Job, string, error) {
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, "", fmt.Errorf("sqlite: list jobs: %w", err)
	}
	defer rows.Close()
	var (
		jobs []warren.Job
		seqs []int64
	)
	for rows.Next() {
		j, seq, err := scanJob(rows)
		if err != nil {
			return nil, "", fmt.Errorf("sqlite: list jobs: %w", err)
		}
		jobs, seqs = append(jobs, j), append(seqs, seq)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("sqlite: list jobs: %w", err)
	}
	if len(jobs) <= limit {
		return jobs, "", nil
	}
	return jobs[:limit], strconv.FormatInt(seqs[limit-1], 10), nil
}

// jobExists returns nil when job id exists and warren.ErrNotFound when not.
func (s *Store) jobExists(ctx context.Context, id string) error {
	var exists bool
	if err := s.r.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM jobs WHERE id = ?)`, id).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		return warren.ErrNotFound
	}
	return nil
}

// parseCursor decodes a list cursor: the job seq or task id where the
// previous page ended. "" is the start of the list.
func parseCursor(cursor string, start int64) (int64, error) {
	if cursor == "" {
		return start, nil
	}
	n, err := strconv.ParseInt(cursor, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("invalid cursor %q", cursor)
	}
	return n, nil
}

// nilIfEmpty returns a copy of b, or nil when b is empty.
func nilIfEmpty(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return json.RawMessage(append([]byte(nil), b...))
}
