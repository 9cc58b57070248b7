package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/internal/engine"
)

// pauseLockKey is the advisory lock key that orders pauses with relay
// rounds within the schema (tests, and tenants, share a database): a
// round holds it shared from its first statement (PendingJobs) to its
// end, a pause exclusively (BeginPause), so that a pause waits for the
// rounds in flight and the rounds after it read it. Rounds never wait
// for each other on it.
const pauseLockKey = `hashtextextended('warren.pause:' || current_schema(), 0)`

// BeginPause implements engine.Driver: a transaction of Begin that
// first takes pauseLockKey exclusively. It holds no row lock while it
// waits, so it closes no cycle with the row lock order.
func (d engineDriver) BeginPause(ctx context.Context) (engine.Tx, error) {
	t, err := d.Begin(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := t.(*tx).tx.Exec(ctx, `SELECT pg_advisory_xact_lock(`+pauseLockKey+`)`); err != nil {
		_ = t.Rollback(context.WithoutCancel(ctx))
		return nil, err
	}
	return t, nil
}

// SetJobPaused implements engine.PauseTx.
func (t *tx) SetJobPaused(ctx context.Context, id string, at time.Time) error {
	_, err := t.tx.Exec(ctx, `UPDATE jobs SET paused_at = $2 WHERE id = $1`, id, at)
	return err
}

// SetJobResumed implements engine.PauseTx.
func (t *tx) SetJobResumed(ctx context.Context, id string, at time.Time) error {
	_, err := t.tx.Exec(ctx, `UPDATE jobs SET paused_at = NULL, resumed_at = $2 WHERE id = $1`, id, at)
	return err
}

// GetQueuePause implements engine.PauseTx.
func (t *tx) GetQueuePause(ctx context.Context, queue string) (*time.Time, error) {
	var at *time.Time
	err := t.tx.QueryRow(ctx, `SELECT paused_at FROM queue_pauses WHERE queue = $1`, queue).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return utc(at), err
}

// SetQueuePaused implements engine.PauseTx.
func (t *tx) SetQueuePaused(ctx context.Context, queue string, at time.Time) error {
	_, err := t.tx.Exec(ctx, `INSERT INTO queue_pauses (queue, paused_at) VALUES ($1, $2)
		ON CONFLICT (queue) DO UPDATE SET paused_at = $2`, queue, at)
	return err
}

// SetQueueResumed implements engine.PauseTx.
func (t *tx) SetQueueResumed(ctx context.Context, queue string, at time.Time) error {
	_, err := t.tx.Exec(ctx, `UPDATE queue_pauses SET paused_at = NULL, resumed_at = $2 WHERE queue = $1`, queue, at)
	return err
}

// PausedQueues returns the paused work queues, by name.
func (s *Store) PausedQueues(ctx context.Context) ([]store.QueuePause, error) {
	rows, _ := s.pool.Query(ctx, `SELECT queue, paused_at FROM queue_pauses WHERE paused_at IS NOT NULL ORDER BY queue`)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.QueuePause, error) {
		var p store.QueuePause
		err := row.Scan(&p.Queue, &p.PausedAt)
		p.PausedAt = p.PausedAt.UTC()
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: paused queues: %w", err)
	}
	return out, nil
}

// PausedJobs returns up to limit ids of open paused jobs, those paused
// first first. A pause is rare, so a walk of the open jobs is what it
// costs.
func (s *Store) PausedJobs(ctx context.Context, limit int) ([]string, error) {
	rows, _ := s.pool.Query(ctx, `SELECT id FROM jobs
		WHERE state IN ('pending', 'running') AND paused_at IS NOT NULL ORDER BY paused_at, id LIMIT $1`, engine.PageSize(limit))
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("postgres: paused jobs: %w", err)
	}
	return ids, nil
}
