package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"

	"github.com/jackc/pgx/v5"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/internal/engine"
	"github.com/warrenhq/warren/store/internal/sqlstore"
)

var _ engine.DeliveryExecutor = engineDriver{}

// InsertJob implements engine.CreateTx. ON CONFLICT waits for a
// concurrent insert of the same key to commit or roll back, so two
// servers racing on one key never both create a job; and it checks its
// arbiter, the key, before the other unique constraints, so a job that
// holds both the key and the id is a taken key.
func (t *tx) InsertJob(ctx context.Context, r engine.NewJobRow) (bool, error) {
	j, p := r.Job, r.Job.Policy
	reduceTask, err := sqlstore.EncodeReduceTask(p.ReduceTask)
	if err != nil {
		return false, err
	}
	then, err := sqlstore.EncodeThen(r.Then)
	if err != nil {
		return false, err
	}
	tag, err := t.tx.Exec(ctx, `
		INSERT INTO jobs (id, type, state, reduce, max_retries, tolerated_failures,
			tolerated_failure_percent, fail_fast, task_timeout_ms, batch_size, retention_ms, metadata, idempotency_key,
			created_at, request_hash, priority, queue, webhook_url, webhook_secret, trace_parent, trace_state, reduce_task,
			then_spec, previous_job, max_concurrency, search_text)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, NULLIF($13, ''), $14, $15, $16, $17, $18, $19, $20, $21, $22,
			$23, $24, $25, $26)
		ON CONFLICT (idempotency_key) DO NOTHING`,
		j.ID, j.Type, string(j.State), p.Reduce, p.MaxRetries, p.ToleratedFailures,
		p.ToleratedFailurePercent, p.FailFast, p.TaskTimeout.Milliseconds(), p.BatchSize, p.Retention.Milliseconds(),
		[]byte(j.Metadata), j.IdempotencyKey, j.CreatedAt, r.RequestHash, p.Priority, p.Queue,
		j.WebhookURL, r.WebhookSecret, j.TraceParent, j.TraceState, reduceTask,
		then, j.PreviousJob, p.MaxConcurrency, engine.SearchText(j))
	if isUniqueViolation(err, "jobs_pkey") {
		return false, fmt.Errorf("%w: %w", engine.ErrIDTaken, err)
	}
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// JobByKey implements engine.CreateTx. It runs after InsertJob found the
// key taken, in a statement of its own: under READ COMMITTED it sees the
// job of the transaction the insert waited for.
func (t *tx) JobByKey(ctx context.Context, key string) (engine.KeyedJob, bool, error) {
	var k engine.KeyedJob
	j, err := scanJob(t.tx.QueryRow(ctx, `SELECT `+jobColumns+`, request_hash FROM jobs WHERE idempotency_key = $1`, key),
		&k.RequestHash)
	if errors.Is(err, pgx.ErrNoRows) {
		return engine.KeyedJob{}, false, nil
	}
	if err != nil {
		return engine.KeyedJob{}, false, err
	}
	k.Job = j
	return k, true, nil
}

// DeletedTasksLeft implements engine.CreateTx.
func (t *tx) DeletedTasksLeft(ctx context.Context, jobID string) (bool, error) {
	var left bool
	err := t.tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM deleted_jobs WHERE job_id = $1)`, jobID).Scan(&left)
	return left, err
}

// InsertTasks implements engine.CreateTx with COPY, fed one row at a
// time from tasks as COPY reads them.
func (t *tx) InsertTasks(ctx context.Context, jobID string, tasks iter.Seq2[json.RawMessage, error]) (int64, error) {
	next, stop := iter.Pull2(tasks)
	defer stop()
	src := &taskSource{next: next, row: []any{jobID, int64(0), string(warren.TaskPending), nil}}
	n, err := t.tx.CopyFrom(ctx, pgx.Identifier{"tasks"}, []string{"job_id", "task_id", "state", "payload"}, src)
	// CopyFrom has waited for its reader goroutine, so src.err is safe to read.
	if src.err != nil {
		return 0, src.err
	}
	if isUniqueViolation(err, "tasks_pkey") {
		return 0, fmt.Errorf("%w: %w", engine.ErrTasksLeft, err)
	}
	if err != nil {
		return 0, fmt.Errorf("write tasks: %w", err)
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

// SetExpectedTasks implements engine.CreateTx.
func (t *tx) SetExpectedTasks(ctx context.Context, jobID string, n int64) (warren.Job, error) {
	return scanJob(t.tx.QueryRow(ctx, `UPDATE jobs SET expected_tasks = $2 WHERE id = $1 RETURNING `+jobColumns, jobID, n))
}

// claimDeliveriesSQL claims up to $3 pending deliveries due at $1, the
// longest due first, skipping those another claim holds: their attempts
// go up by one and they are due again at $2 (the lease). It returns them
// with their bodies and their jobs' webhooks; only delivery rows are
// locked.
const claimDeliveriesSQL = `
	WITH due AS (
		SELECT id FROM webhook_deliveries
		WHERE state = 'pending' AND next_attempt_at <= $1
		ORDER BY next_attempt_at, id
		LIMIT $3
		FOR UPDATE SKIP LOCKED
	)
	UPDATE webhook_deliveries d SET attempts = d.attempts + 1, next_attempt_at = $2
	FROM due, jobs j
	WHERE d.id = due.id AND j.id = d.job_id
	RETURNING ` + deliveryColumns + `, d.body, j.webhook_url, j.webhook_secret`

// ClaimDeliveries implements engine.DeliveryExecutor in one statement
// (claimDeliveriesSQL) on the pool: several servers may claim at once,
// and FOR UPDATE SKIP LOCKED hands each delivery to one of them.
func (d engineDriver) ClaimDeliveries(ctx context.Context, c engine.DeliveryClaim) ([]store.ClaimedDelivery, error) {
	rows, err := d.s.pool.Query(ctx, claimDeliveriesSQL, c.Due, c.Until, c.Limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.ClaimedDelivery, error) {
		var c store.ClaimedDelivery
		var err error
		c.Delivery, err = scanDelivery(row, &c.Body, &c.URL, &c.Secret)
		return c, err
	})
}

// RecordDelivery implements engine.DeliveryExecutor in one statement on
// the pool.
func (d engineDriver) RecordDelivery(ctx context.Context, r engine.DeliveryRecord) (bool, error) {
	if r.Release {
		tag, err := d.s.pool.Exec(ctx, `
			UPDATE webhook_deliveries SET attempts = attempts - 1, next_attempt_at = $2
			WHERE id = $1 AND state = 'pending' AND attempts = $3 AND attempts > 0`, r.ID, r.NextAttemptAt, r.Attempt)
		if err != nil {
			return false, err
		}
		return tag.RowsAffected() == 1, nil
	}
	tag, err := d.s.pool.Exec(ctx, `
		UPDATE webhook_deliveries
		SET state = $2, last_status = $3, last_error = $4, next_attempt_at = $5, delivered_at = $6
		WHERE id = $1 AND state = 'pending' AND attempts = $7`,
		r.ID, string(r.State), r.Status, r.Error, r.NextAttemptAt, r.DeliveredAt, r.Attempt)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// FollowUpOf implements engine.FollowUpTx.
func (t *tx) FollowUpOf(ctx context.Context, jobID string) (engine.FollowUpRow, error) {
	var (
		then []byte
		r    engine.FollowUpRow
	)
	err := t.tx.QueryRow(ctx, `SELECT then_spec, webhook_secret FROM jobs WHERE id = $1`, jobID).Scan(&then, &r.WebhookSecret)
	if errors.Is(err, pgx.ErrNoRows) {
		return engine.FollowUpRow{}, notFound(jobID)
	}
	if err != nil {
		return engine.FollowUpRow{}, err
	}
	r.Then, err = sqlstore.DecodeThenSpec(then)
	return r, err
}

// SetNextJob implements engine.FollowUpTx.
func (t *tx) SetNextJob(ctx context.Context, jobID, next string) error {
	_, err := t.tx.Exec(ctx, `UPDATE jobs SET next_job = $2 WHERE id = $1`, jobID, next)
	return err
}
