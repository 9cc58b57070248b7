package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/spool"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/internal/engine"
	"github.com/warrenhq/warren/store/internal/sqlstore"
)

// insertBatch is how many task rows one INSERT statement writes. Three
// parameters per row stay well under SQLite's limit of 32766.
const insertBatch = 500

// insertArgs is the number of parameters of one task row.
const insertArgs = 3

// InsertJob implements engine.CreateTx. SQLite checks the conflict
// target of an upsert before the other unique constraints, so a job
// that holds both the key and the id is a taken key.
func (t *tx) InsertJob(ctx context.Context, r engine.NewJobRow) (bool, error) {
	j := r.Job
	var key, metadata any
	if j.IdempotencyKey != "" {
		key = j.IdempotencyKey
	}
	if j.Metadata != nil {
		metadata = []byte(j.Metadata)
	}
	reduceTask, err := sqlstore.EncodeReduceTask(j.Policy.ReduceTask)
	if err != nil {
		return false, err
	}
	var reduceCol any // a nil []byte would not be NULL to every driver
	if reduceTask != nil {
		reduceCol = reduceTask
	}
	then, err := sqlstore.EncodeThen(r.Then)
	if err != nil {
		return false, err
	}
	var thenCol any
	if then != nil {
		thenCol = then
	}
	res, err := t.tx.ExecContext(ctx, `INSERT INTO jobs (id, type, state, reduce, max_retries, tolerated_failures,
		tolerated_failure_percent, fail_fast, task_timeout_ms, batch_size, retention_ms, metadata, idempotency_key, created_at,
		request_hash, priority, queue, webhook_url, webhook_secret, trace_parent, trace_state, reduce_task,
		then_spec, previous_job, max_concurrency, search_text)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (idempotency_key) DO NOTHING`,
		j.ID, j.Type, string(j.State), j.Policy.Reduce, j.Policy.MaxRetries, j.Policy.ToleratedFailures,
		j.Policy.ToleratedFailurePercent, j.Policy.FailFast, j.Policy.TaskTimeout.Milliseconds(),
		j.Policy.BatchSize, j.Policy.Retention.Milliseconds(), metadata, key, j.CreatedAt.UnixMicro(),
		r.RequestHash, j.Policy.Priority, j.Policy.Queue, j.WebhookURL, r.WebhookSecret, j.TraceParent, j.TraceState, reduceCol,
		thenCol, j.PreviousJob, j.Policy.MaxConcurrency, engine.SearchText(j))
	if isConstraint(err, sqlite3.SQLITE_CONSTRAINT_UNIQUE) {
		// jobs.id is the one unique column left: seq is the rowid.
		return false, fmt.Errorf("%w: %w", engine.ErrIDTaken, err)
	}
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// JobByKey implements engine.CreateTx.
func (t *tx) JobByKey(ctx context.Context, key string) (engine.KeyedJob, bool, error) {
	return jobByKey(ctx, t.tx, key)
}

// jobByKey reads the job that holds idempotency key key, and its request
// hash.
func jobByKey(ctx context.Context, q querier, key string) (engine.KeyedJob, bool, error) {
	var k engine.KeyedJob
	row := q.QueryRowContext(ctx, `SELECT `+jobColumns+`, request_hash FROM jobs WHERE idempotency_key = ?`, key)
	j, _, err := scanJob(scanAlso{row, []any{&k.RequestHash}})
	if errors.Is(err, sql.ErrNoRows) {
		return engine.KeyedJob{}, false, nil
	}
	if err != nil {
		return engine.KeyedJob{}, false, err
	}
	k.Job = j
	return k, true, nil
}

// scanAlso scans a row of jobColumns followed by the columns extra reads.
type scanAlso struct {
	row   *sql.Row
	extra []any
}

// Scan scans into dest, then into the extra destinations.
func (s scanAlso) Scan(dest ...any) error { return s.row.Scan(append(dest, s.extra...)...) }

// DeletedTasksLeft implements engine.CreateTx.
func (t *tx) DeletedTasksLeft(ctx context.Context, jobID string) (bool, error) {
	var left bool
	err := t.tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM deleted_jobs WHERE job_id = ?)`, jobID).Scan(&left)
	return left, err
}

// StageJob implements engine.Driver: the key is looked up on a reader
// connection, and the tasks are spooled (memory, then an unlinked
// temporary file), then inserted at disk speed inside the write
// transaction, so that a slow upload never holds the one writer.
func (d engineDriver) StageJob(ctx context.Context, key string, tasks iter.Seq2[json.RawMessage, error]) (engine.StagedJob, error) {
	if key != "" {
		holder, found, err := jobByKey(ctx, d.s.r, key)
		if err != nil {
			return engine.StagedJob{}, err
		}
		if found {
			return engine.StagedJob{Holder: &holder}, nil
		}
	}
	sp, err := spool.Tasks(tasks)
	if err != nil {
		return engine.StagedJob{}, err
	}
	// A small job in memory shares its transaction with the creates that
	// wait for the one writer at the same time (engine.StagedJob.Small).
	small := sp.Len() <= engine.GroupTasks && sp.InMemory()
	return engine.StagedJob{Tasks: sp.All(), Release: sp.Close, Small: small}, nil
}

// InsertTasks implements engine.CreateTx with multi-row INSERTs of
// insertBatch rows, one prepared statement for the full ones.
func (t *tx) InsertTasks(ctx context.Context, jobID string, tasks iter.Seq2[json.RawMessage, error]) (int64, error) {
	n, err := insertTasks(ctx, t.tx, jobID, tasks)
	if isConstraint(err, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
		return 0, fmt.Errorf("%w: %w", engine.ErrTasksLeft, err)
	}
	return n, err
}

// insertTasks writes the task rows of InsertTasks.
func insertTasks(ctx context.Context, tx *sql.Tx, jobID string, tasks iter.Seq2[json.RawMessage, error]) (int64, error) {
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
		args = append(args, jobID, n, []byte(payload))
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

// SetExpectedTasks implements engine.CreateTx.
func (t *tx) SetExpectedTasks(ctx context.Context, jobID string, n int64) (warren.Job, error) {
	j, _, err := scanJob(t.tx.QueryRowContext(ctx, `UPDATE jobs SET expected_tasks = ? WHERE id = ? RETURNING `+jobColumns, n, jobID))
	return j, err
}

// isConstraint reports whether err is SQLite's constraint violation of
// extended code code.
func isConstraint(err error, code int) bool {
	var e *sqlite.Error
	return errors.As(err, &e) && e.Code() == code
}

// ClaimDeliveries implements engine.DeliveryExecutor in one statement on
// the writer (writes are serialised, so no two claims take one
// delivery). A reader looks first, so that a poll that finds nothing
// due never takes the writer.
func (d engineDriver) ClaimDeliveries(ctx context.Context, c engine.DeliveryClaim) ([]store.ClaimedDelivery, error) {
	due := c.Due.UnixMicro()
	var found bool
	if err := d.s.r.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM webhook_deliveries INDEXED BY webhook_deliveries_due
		WHERE state = 'pending' AND next_attempt_at <= ?)`, due).Scan(&found); err != nil {
		return nil, err
	}
	if !found {
		return nil, nil
	}
	rows, err := d.s.w.QueryContext(ctx, `UPDATE webhook_deliveries SET attempts = attempts + 1, next_attempt_at = ?
		WHERE id IN (SELECT id FROM webhook_deliveries INDEXED BY webhook_deliveries_due
			WHERE state = 'pending' AND next_attempt_at <= ? ORDER BY next_attempt_at, id LIMIT ?)
		RETURNING `+deliveryColumns+`, body,
			(SELECT j.webhook_url FROM jobs j WHERE j.id = webhook_deliveries.job_id),
			(SELECT j.webhook_secret FROM jobs j WHERE j.id = webhook_deliveries.job_id)`, c.Until.UnixMicro(), due, c.Limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var claimed []store.ClaimedDelivery
	for rows.Next() {
		var c store.ClaimedDelivery
		if c.Delivery, err = scanDelivery(rows, &c.Body, &c.URL, &c.Secret); err != nil {
			return nil, err
		}
		claimed = append(claimed, c)
	}
	return claimed, rows.Err()
}

// RecordDelivery implements engine.DeliveryExecutor in one statement on
// the writer.
func (d engineDriver) RecordDelivery(ctx context.Context, r engine.DeliveryRecord) (bool, error) {
	if r.Release {
		res, err := d.s.w.ExecContext(ctx, `UPDATE webhook_deliveries SET attempts = attempts - 1, next_attempt_at = ?
			WHERE id = ? AND state = 'pending' AND attempts = ? AND attempts > 0`, micros(r.NextAttemptAt), r.ID, r.Attempt)
		if err != nil {
			return false, err
		}
		n, err := res.RowsAffected()
		return n == 1, err
	}
	res, err := d.s.w.ExecContext(ctx, `UPDATE webhook_deliveries
		SET state = ?, last_status = ?, last_error = ?, next_attempt_at = ?, delivered_at = ?
		WHERE id = ? AND state = 'pending' AND attempts = ?`,
		string(r.State), r.Status, r.Error, micros(r.NextAttemptAt), micros(r.DeliveredAt), r.ID, r.Attempt)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// FollowUpOf implements engine.FollowUpTx.
func (t *tx) FollowUpOf(ctx context.Context, jobID string) (engine.FollowUpRow, error) {
	var (
		then []byte
		r    engine.FollowUpRow
	)
	err := t.tx.QueryRowContext(ctx, `SELECT then_spec, webhook_secret FROM jobs WHERE id = ?`, jobID).Scan(&then, &r.WebhookSecret)
	if errors.Is(err, sql.ErrNoRows) {
		return engine.FollowUpRow{}, warren.ErrNotFound
	}
	if err != nil {
		return engine.FollowUpRow{}, err
	}
	r.Then, err = sqlstore.DecodeThenSpec(then)
	return r, err
}

// SetNextJob implements engine.FollowUpTx.
func (t *tx) SetNextJob(ctx context.Context, jobID, next string) error {
	_, err := t.tx.ExecContext(ctx, `UPDATE jobs SET next_job = ? WHERE id = ?`, next, jobID)
	return err
}
