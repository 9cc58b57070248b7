package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/spool"
	"github.com/warrenhq/warren/store"
)

// insertBatch is how many task rows one INSERT statement writes. Three
// parameters per row stay well under SQLite's limit of 32766.
const insertBatch = 500

// insertArgs is the number of parameters of one task row.
const insertArgs = 3

// CreateJob writes the job and its tasks in one transaction, streaming the
// payloads in multi-row INSERTs of insertBatch rows, so only one batch of
// payloads is in memory at a time. A nil payload is stored as JSON null.
// An explicit spec.ID that already exists, or names a deleted job whose
// tasks are not purged yet, is an error wrapping warren.ErrConflict. An invalid spec (store.ValidateNewJob) is an error
// before anything is read or written.
func (s *Store) CreateJob(ctx context.Context, spec store.NewJob, tasks iter.Seq2[json.RawMessage, error]) (warren.Job, bool, error) {
	if err := store.ValidateNewJob(spec); err != nil {
		return warren.Job{}, false, fmt.Errorf("sqlite: create job: %w", err)
	}
	job := warren.Job{
		ID:             spec.ID,
		WebhookURL:     webhookOf(spec).URL,
		Type:           spec.Type,
		State:          warren.JobPending,
		Policy:         spec.Policy,
		Metadata:       nilIfEmpty(spec.Metadata),
		IdempotencyKey: spec.IdempotencyKey,
		CreatedAt:      now(),
	}
	// The timeout and the retention are stored in milliseconds: return
	// what GetJob will.
	job.Policy.TaskTimeout = job.Policy.TaskTimeout.Truncate(time.Millisecond)
	job.Policy.Retention = job.Policy.Retention.Truncate(time.Millisecond)
	if job.ID == "" {
		job.ID = ulid.Make().String()
	}
	if spec.IdempotencyKey != "" {
		// A replay must not consume the tasks.
		first, err := replayOf(ctx, s.r, spec)
		if err == nil {
			return first, false, nil
		}
		if errors.Is(err, store.ErrKeyReused) {
			return warren.Job{}, false, fmt.Errorf("sqlite: create job: %w", err)
		}
		if !errors.Is(err, warren.ErrNotFound) {
			return warren.Job{}, false, fmt.Errorf("sqlite: create job: %w", err)
		}
	}
	// SQLite has one writer: reading a slow upload inside the write
	// transaction would stall the relay and the aggregator. The tasks are
	// spooled to a temporary file first (disk, not memory), then inserted
	// at disk speed.
	sp, err := spool.Tasks(tasks)
	if err != nil {
		return warren.Job{}, false, err
	}
	defer sp.Close()
	created := true
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if spec.IdempotencyKey != "" {
			first, err := replayOf(ctx, tx, spec)
			if err == nil {
				job, created = first, false
				return nil
			}
			if !errors.Is(err, warren.ErrNotFound) {
				return err
			}
		}
		var exists, deleted bool
		if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM jobs WHERE id = ?1),
			EXISTS (SELECT 1 FROM deleted_jobs WHERE job_id = ?1)`, job.ID).Scan(&exists, &deleted); err != nil {
			return err
		}
		if exists {
			return fmt.Errorf("job %s already exists: %w", job.ID, warren.ErrConflict)
		}
		if deleted {
			return fmt.Errorf("job %s was deleted and its tasks are not purged yet: %w", job.ID, warren.ErrConflict)
		}
		if err := insertJob(ctx, tx, job, spec.RequestHash, webhookOf(spec)); err != nil {
			return err
		}
		n, err := insertTasks(ctx, tx, job.ID, sp.All())
		if err != nil {
			return err
		}
		job.ExpectedTasks = n
		_, err = tx.ExecContext(ctx, `UPDATE jobs SET expected_tasks = ?, trace_parent = ?, trace_state = ? WHERE id = ?`,
			n, spec.TraceParent, spec.TraceState, job.ID)
		return err
	})
	if err != nil {
		return warren.Job{}, false, fmt.Errorf("sqlite: create job: %w", err)
	}
	return job, created, nil
}

// replayOf returns the job spec's idempotency key names, as store.Replay
// decides; warren.ErrNotFound when there is none.
func replayOf(ctx context.Context, q querier, spec store.NewJob) (warren.Job, error) {
	first, err := getJob(ctx, q, "idempotency_key = ?", spec.IdempotencyKey)
	if err != nil {
		return warren.Job{}, err
	}
	var hash string
	if err := q.QueryRowContext(ctx, `SELECT request_hash FROM jobs WHERE id = ?`, first.ID).Scan(&hash); err != nil {
		return warren.Job{}, err
	}
	return store.Replay(first, hash, spec)
}

// webhookOf returns spec's webhook, or the zero Webhook for none.
func webhookOf(spec store.NewJob) store.Webhook {
	if spec.Webhook == nil {
		return store.Webhook{}
	}
	return *spec.Webhook
}

// insertJob writes job j's row, with its webhook, with no tasks expected
// yet.
func insertJob(ctx context.Context, tx *sql.Tx, j warren.Job, requestHash string, webhook store.Webhook) error {
	var key any
	if j.IdempotencyKey != "" {
		key = j.IdempotencyKey
	}
	var metadata any
	if j.Metadata != nil {
		metadata = []byte(j.Metadata)
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO jobs (id, type, state, reduce, max_retries, tolerated_failures,
		tolerated_failure_percent, fail_fast, task_timeout_ms, batch_size, retention_ms, metadata, idempotency_key, created_at, request_hash, priority, queue,
		webhook_url, webhook_secret)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		j.ID, j.Type, string(j.State), j.Policy.Reduce, j.Policy.MaxRetries, j.Policy.ToleratedFailures,
		j.Policy.ToleratedFailurePercent, j.Policy.FailFast, j.Policy.TaskTimeout.Milliseconds(),
		j.Policy.BatchSize, j.Policy.Retention.Milliseconds(), metadata, key, j.CreatedAt.UnixMicro(), requestHash, j.Policy.Priority, j.Policy.Queue,
		webhook.URL, webhook.Secret)
	return err
}

// insertTasks streams tasks into the tasks table of job id and returns how
// many it wrote. The first error from tasks is returned as it is.
func insertTasks(ctx context.Context, tx *sql.Tx, id string, tasks iter.Seq2[json.RawMessage, error]) (int64, error) {
	full, err := tx.PrepareContext(ctx, insertTasksSQL(insertBatch))
	if err != nil {
		return 0, err
	}
	defer full.Close()
	// Anonymous parameters: the driver looks a named one up by a linear
	// scan, which would make binding a batch quadratic.
	args := make([]any, 0, insertArgs*insertBatch)
	var n int64
	for payload, err := range tasks {
		if err != nil {
			return 0, err
		}
		n++
		if payload == nil {
			payload = json.RawMessage("null")
		}
		args = append(args, id, n, []byte(payload))
		if len(args) == cap(args) {
			if _, err := full.ExecContext(ctx, args...); err != nil {
				return 0, err
			}
			clear(args)
			args = args[:0]
		}
	}
	if rows := len(args) / insertArgs; rows > 0 {
		if _, err := tx.ExecContext(ctx, insertTasksSQL(rows), args...); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// insertTasksSQL is an INSERT of rows task rows, each a job id, a task
// id and a payload.
func insertTasksSQL(rows int) string {
	return `INSERT INTO tasks (job_id, task_id, payload) VALUES ` +
		strings.TrimSuffix(strings.Repeat("(?,?,?),", rows), ",")
}

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
	created_at, started_at, finished_at, result_location, error, webhook_url, version, trace_parent, trace_state, seq`

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
	)
	err := row.Scan(&j.ID, &j.Type, &state, &j.ExpectedTasks, &j.CompletedTasks, &j.FailedTasks,
		&j.Policy.Reduce, &j.Policy.MaxRetries, &j.Policy.ToleratedFailures, &j.Policy.ToleratedFailurePercent,
		&j.Policy.FailFast, &timeoutMS, &j.Policy.BatchSize, &j.Policy.Priority, &j.Policy.Queue, &retentionMS, &metadata, &j.IdempotencyKey, &created, &started, &finished,
		&j.ResultLocation, &j.Error, &j.WebhookURL, &j.Version, &j.TraceParent, &j.TraceState, &seq)
	if err != nil {
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
	limit := store.PageSize(opts.Limit)
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
