package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store/internal/engine"
)

// engineDriver is the store's engine.Driver: write transactions on the single
// writer connection.
type engineDriver struct{ s *Store }

var _ engine.Driver = engineDriver{}

// Name implements engine.Driver.
func (engineDriver) Name() string { return "sqlite" }

// Begin starts a write transaction (BEGIN IMMEDIATE on the writer
// connection, so writes are serialised in-process).
func (d engineDriver) Begin(ctx context.Context) (engine.Tx, error) {
	t, err := d.s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return &tx{tx: t, s: d.s}, nil
}

// tx is a write transaction with the engine's primitives.
type tx struct {
	tx *sql.Tx
	// s is the store whose statements stmt reuses (nil: prepare each).
	s *Store
}

// stmt returns query prepared for this transaction. Statements of the
// writer connection are prepared once per store and reused by every
// transaction (database/sql reuses a statement prepared on the
// transaction's own connection): preparing is a tenth of what a small
// outcome batch costs.
func (t *tx) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if t.s != nil {
		if shared := t.s.writerStmt(query); shared != nil {
			return t.tx.StmtContext(ctx, shared), nil
		}
	}
	return t.tx.PrepareContext(ctx, query)
}

var _ engine.Tx = (*tx)(nil)

// Commit implements engine.Tx.
func (t *tx) Commit(context.Context) error { return t.tx.Commit() }

// Rollback implements engine.Tx.
func (t *tx) Rollback(context.Context) error {
	err := t.tx.Rollback()
	if errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("%w: %w", engine.ErrTxDone, err)
	}
	return err
}

// GetJob implements engine.CloseTx.
func (t *tx) GetJob(ctx context.Context, id string) (warren.Job, error) {
	j, err := getJob(ctx, t.tx, "id = ?", id)
	if errors.Is(err, warren.ErrNotFound) {
		return warren.Job{}, fmt.Errorf("job %q: %w", id, warren.ErrNotFound)
	}
	return j, err
}

// CancelTasks implements engine.CloseTx.
func (t *tx) CancelTasks(ctx context.Context, jobID string, at time.Time) error {
	return cancelUnfinished(ctx, t.tx, jobID, at)
}

// CloseJob implements engine.CloseTx.
func (t *tx) CloseJob(ctx context.Context, c engine.JobClose) (warren.Job, bool, error) {
	var reduceState any // NULL keeps it
	if c.ReduceState != nil {
		reduceState = *c.ReduceState
	}
	j, _, err := scanJob(t.tx.QueryRowContext(ctx, `UPDATE jobs SET state = ?, finished_at = ?, error = ?, result_location = ?,
			reduce_state = COALESCE(?, reduce_state), version = version + 1, paused_at = NULL
		WHERE id = ? AND (? < 0 OR version = ?) AND state IN ('pending', 'running')
		RETURNING `+jobColumns,
		string(c.State), c.FinishedAt.UnixMicro(), c.Error, c.ResultLocation, reduceState, c.ID, c.Version, c.Version))
	if errors.Is(err, sql.ErrNoRows) {
		return warren.Job{}, false, nil
	}
	if err != nil {
		return warren.Job{}, false, err
	}
	return j, true, nil
}

// PutResult implements engine.CloseTx.
func (t *tx) PutResult(ctx context.Context, jobID string, data []byte) error {
	return putResult(ctx, t.tx, jobID, data)
}

// InsertDelivery implements engine.CloseTx.
func (t *tx) InsertDelivery(ctx context.Context, d engine.NewDelivery) error {
	_, err := t.tx.ExecContext(ctx, `INSERT INTO webhook_deliveries (id, job_id, event, body, created_at, next_attempt_at)
		VALUES (?, ?, ?, ?, ?, ?)`, d.ID, d.JobID, d.Event, d.Body, d.At.UnixMicro(), d.At.UnixMicro())
	return err
}

// ScanResults implements engine.CloseTx.
func (t *tx) ScanResults(ctx context.Context, jobID string, fn func(taskID int64, state warren.TaskState, result json.RawMessage) error) error {
	rows, err := t.tx.QueryContext(ctx, `SELECT task_id, state, result FROM tasks WHERE job_id = ? AND task_id > 0 ORDER BY task_id`, jobID)
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
		if err := fn(id, warren.TaskState(state), nilIfEmpty(result)); err != nil {
			return err
		}
	}
	return rows.Err()
}
