package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
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
	reduce_task, reduce_state, then_spec, next_job, previous_job, max_concurrency, spawned_tasks, seq`

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
		reduceTask        []byte
		then              []byte
	)
	err := row.Scan(&j.ID, &j.Type, &state, &j.ExpectedTasks, &j.CompletedTasks, &j.FailedTasks,
		&j.Policy.Reduce, &j.Policy.MaxRetries, &j.Policy.ToleratedFailures, &j.Policy.ToleratedFailurePercent,
		&j.Policy.FailFast, &timeoutMS, &j.Policy.BatchSize, &j.Policy.Priority, &j.Policy.Queue, &retentionMS, &metadata, &j.IdempotencyKey, &created, &started, &finished,
		&j.ResultLocation, &j.Error, &j.WebhookURL, &j.Version, &j.TraceParent, &j.TraceState,
		&reduceTask, &j.ReduceState, &then, &j.NextJob, &j.PreviousJob, &j.Policy.MaxConcurrency, &j.SpawnedTasks, &seq)
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
	j.FinishedAt = timeOf(finished)
	return j, seq, nil
}

// ListJobs returns up to opts.Limit jobs newest first (creation order),
// optionally of one state and of one type. The cursor is opaque; a malformed one is an
// error.
func (s *Store) ListJobs(ctx context.Context, opts store.ListJobsOpts) ([]warren.Job, string, error) {
	limit := engine.PageSize(opts.Limit)
	before, err := parseCursor(opts.Cursor, math.MaxInt64)
	if err != nil {
		return nil, "", fmt.Errorf("sqlite: list jobs: %w", err)
	}
	query := `SELECT ` + jobColumns + ` FROM jobs WHERE seq < ? `
	args := []any{before}
	if opts.State != "" {
		query += `AND state = ? `
		args = append(args, string(opts.State))
	}
	if opts.Type != "" {
		query += `AND type = ? `
		args = append(args, opts.Type)
	}
	query += `ORDER BY seq DESC LIMIT ?`
	args = append(args, limit+1)
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
