package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store/internal/engine"
)

// engineDriver is the store's engine.Driver: transactions on the pool.
type engineDriver struct{ s *Store }

var _ engine.Driver = engineDriver{}

// Name implements engine.Driver.
func (engineDriver) Name() string { return "postgres" }

// Begin starts a transaction (READ COMMITTED, as the pool's default).
func (d engineDriver) Begin(ctx context.Context) (engine.Tx, error) {
	t, err := d.s.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &tx{tx: t}, nil
}

// relayBegin begins a relay round's transaction, in the same round trip
// as the setting that lets its commit return before PostgreSQL flushes
// it (synchronous_commit off, for this transaction only).
const relayBegin = "BEGIN; SET LOCAL synchronous_commit TO OFF"

// BeginRelay implements engine.Driver: a transaction whose claim's row
// locks (FOR UPDATE SKIP LOCKED) keep other rounds, in any process, off
// its tasks until it ends. Its commit does not wait for the flush of the
// log: PostgreSQL flushes the log in order, so a crash of the database
// can lose such a commit only with every commit after it, and a round's
// commit holds only its marks (tasks queued, jobs running), whose loss
// leaves those tasks pending, to be published again, and the duplicate
// results ignored. Every commit that answers a client or allows an ack
// waits for its flush.
func (d engineDriver) BeginRelay(ctx context.Context) (engine.RelayRoundTx, error) {
	t, err := d.s.pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: relayBegin})
	if err != nil {
		return nil, err
	}
	return &tx{tx: t}, nil
}

// BeginDelete implements engine.Driver plainly: a transaction of Begin.
// Task rows have no foreign key to their job, so deleting a job's row
// leaves them for PurgeDeletedTasks.
func (d engineDriver) BeginDelete(ctx context.Context) (engine.Tx, error) {
	return d.Begin(ctx)
}

// StageJob implements engine.Driver plainly: the tasks are copied in as
// they come (COPY), and InsertJob finds a taken key itself, so a create
// costs no lookup first.
func (engineDriver) StageJob(_ context.Context, _ string, tasks iter.Seq2[json.RawMessage, error]) (engine.StagedJob, error) {
	return engine.StagedJob{Tasks: tasks}, nil
}

// Peek implements engine.Driver plainly: no look first. Retention's
// reads in its transaction skip the rows others hold, and a look would
// only add a round trip to a sweep.
func (engineDriver) Peek() engine.RetentionReader { return nil }

// tx is a transaction with the engine's primitives.
type tx struct{ tx pgx.Tx }

var _ engine.Tx = (*tx)(nil)

// Commit implements engine.Tx.
func (t *tx) Commit(ctx context.Context) error { return t.tx.Commit(ctx) }

// Rollback implements engine.Tx.
func (t *tx) Rollback(ctx context.Context) error {
	err := t.tx.Rollback(ctx)
	if errors.Is(err, pgx.ErrTxClosed) {
		return fmt.Errorf("%w: %w", engine.ErrTxDone, err)
	}
	return err
}

// GetJob implements engine.CloseTx.
func (t *tx) GetJob(ctx context.Context, id string) (warren.Job, error) {
	j, err := scanJob(t.tx.QueryRow(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return warren.Job{}, fmt.Errorf("job %q: %w", id, warren.ErrNotFound)
	}
	return j, err
}

// CancelTasks implements engine.CloseTx: the tasks are locked in task id
// order, before anything touches the job row (the lock order of the
// package doc).
func (t *tx) CancelTasks(ctx context.Context, jobID string, at time.Time) error {
	_, err := t.tx.Exec(ctx, `
		UPDATE tasks SET state = 'cancelled', finished_at = $2
		WHERE job_id = $1 AND state IN ('pending', 'queued') AND task_id IN (
			SELECT task_id FROM tasks
			WHERE job_id = $1 AND state IN ('pending', 'queued')
			ORDER BY task_id
			FOR UPDATE)`, jobID, at)
	if err != nil {
		return fmt.Errorf("cancel tasks of job %q: %w", jobID, err)
	}
	return nil
}

// CloseJob implements engine.CloseTx. A reopen that holds the job row
// makes the update wait for it and re-read the row, so the guard sees
// the reopen.
func (t *tx) CloseJob(ctx context.Context, c engine.JobClose) (warren.Job, bool, error) {
	// The close notifies the servers that listen (ListenClosed) in the
	// same round trip; the notice goes out when the transaction commits.
	j, err := scanJob(t.tx.QueryRow(ctx, `
		WITH closed AS (
			UPDATE jobs SET state = $2, finished_at = $3, error = $4, result_location = $5,
				reduce_state = COALESCE($7::text, reduce_state), version = version + 1, paused_at = NULL
			WHERE id = $1 AND ($6 < 0 OR version = $6) AND state IN ('pending', 'running')
			RETURNING `+jobColumns+`)
		SELECT closed.* FROM closed CROSS JOIN LATERAL (SELECT pg_notify('`+closedChannel+`', current_schema() || ' ' || closed.id)) AS notified`,
		c.ID, string(c.State), c.FinishedAt, c.Error, c.ResultLocation, c.Version, c.ReduceState))
	if errors.Is(err, pgx.ErrNoRows) {
		return warren.Job{}, false, nil
	}
	if err != nil {
		return warren.Job{}, false, err
	}
	return j, true, nil
}

// PutResult implements engine.CloseTx. A redriven job closes again: its
// new result replaces the old one.
func (t *tx) PutResult(ctx context.Context, jobID string, data []byte) error {
	_, err := t.tx.Exec(ctx, `
		INSERT INTO job_results (job_id, data) VALUES ($1, $2)
		ON CONFLICT (job_id) DO UPDATE SET data = EXCLUDED.data`, jobID, data)
	if err != nil {
		return fmt.Errorf("store result: %w", err)
	}
	return nil
}

// InsertDelivery implements engine.CloseTx.
func (t *tx) InsertDelivery(ctx context.Context, d engine.NewDelivery) error {
	_, err := t.tx.Exec(ctx, `INSERT INTO webhook_deliveries (id, job_id, event, body, created_at, next_attempt_at)
		VALUES ($1, $2, $3, $4, $5, $5)`, d.ID, d.JobID, d.Event, d.Body, d.At)
	return err
}

// ScanResults implements engine.CloseTx.
func (t *tx) ScanResults(ctx context.Context, jobID string, fn func(taskID int64, state warren.TaskState, result json.RawMessage) error) error {
	rows, err := t.tx.Query(ctx, `SELECT task_id, state, result FROM tasks WHERE job_id = $1 AND task_id > 0 ORDER BY task_id`, jobID)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id     int64
			state  string
			result []byte
		)
		if err := rows.Scan(&id, &state, &result); err != nil {
			return err
		}
		if err := fn(id, warren.TaskState(state), result); err != nil {
			return err
		}
	}
	return rows.Err()
}
