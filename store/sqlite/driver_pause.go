package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/internal/engine"
)

// BeginPause implements engine.Driver: the store's relay slot, which a
// round holds from its claim to its marks, then a write transaction. A
// round in flight is waited for, and the next one reads the pause. The
// slot is always taken before the writer, as a round takes it.
func (d engineDriver) BeginPause(ctx context.Context) (engine.Tx, error) {
	select {
	case d.s.relay <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	t, err := d.Begin(ctx)
	if err != nil {
		<-d.s.relay
		return nil, err
	}
	return &pauseTx{tx: t.(*tx), s: d.s}, nil
}

// pauseTx is a write transaction that holds the store's relay slot until
// it ends.
type pauseTx struct {
	*tx
	s    *Store
	once sync.Once
}

func (p *pauseTx) release() { p.once.Do(func() { <-p.s.relay }) }

// Commit implements engine.Tx.
func (p *pauseTx) Commit(ctx context.Context) error {
	defer p.release()
	return p.tx.Commit(ctx)
}

// Rollback implements engine.Tx.
func (p *pauseTx) Rollback(ctx context.Context) error {
	defer p.release()
	return p.tx.Rollback(ctx)
}

// SetJobPaused implements engine.PauseTx.
func (t *tx) SetJobPaused(ctx context.Context, id string, at time.Time) error {
	_, err := t.tx.ExecContext(ctx, `UPDATE jobs SET paused_at = ? WHERE id = ?`, at.UnixMicro(), id)
	return err
}

// SetJobResumed implements engine.PauseTx.
func (t *tx) SetJobResumed(ctx context.Context, id string, at time.Time) error {
	_, err := t.tx.ExecContext(ctx, `UPDATE jobs SET paused_at = NULL, resumed_at = ? WHERE id = ?`, at.UnixMicro(), id)
	return err
}

// GetQueuePause implements engine.PauseTx.
func (t *tx) GetQueuePause(ctx context.Context, queue string) (*time.Time, error) {
	var at sql.NullInt64
	err := t.tx.QueryRowContext(ctx, `SELECT paused_at FROM queue_pauses WHERE queue = ?`, queue).Scan(&at)
	if err == sql.ErrNoRows {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return timeOf(at), nil
}

// SetQueuePaused implements engine.PauseTx.
func (t *tx) SetQueuePaused(ctx context.Context, queue string, at time.Time) error {
	_, err := t.tx.ExecContext(ctx, `INSERT INTO queue_pauses (queue, paused_at) VALUES (?1, ?2)
		ON CONFLICT (queue) DO UPDATE SET paused_at = ?2`, queue, at.UnixMicro())
	return err
}

// SetQueueResumed implements engine.PauseTx.
func (t *tx) SetQueueResumed(ctx context.Context, queue string, at time.Time) error {
	_, err := t.tx.ExecContext(ctx, `UPDATE queue_pauses SET paused_at = NULL, resumed_at = ? WHERE queue = ?`, at.UnixMicro(), queue)
	return err
}

// PausedQueues returns the paused work queues, by name.
func (s *Store) PausedQueues(ctx context.Context) ([]store.QueuePause, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT queue, paused_at FROM queue_pauses WHERE paused_at IS NOT NULL ORDER BY queue`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: paused queues: %w", err)
	}
	defer rows.Close()
	var out []store.QueuePause
	for rows.Next() {
		var (
			q  string
			at int64
		)
		if err := rows.Scan(&q, &at); err != nil {
			return nil, fmt.Errorf("sqlite: paused queues: %w", err)
		}
		out = append(out, store.QueuePause{Queue: q, PausedAt: time.UnixMicro(at).UTC()})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: paused queues: %w", err)
	}
	return out, nil
}

// PausedJobs returns up to limit ids of open paused jobs, those paused
// first first. jobs_open holds the open jobs; a pause is rare, so the
// walk costs what the open jobs do.
func (s *Store) PausedJobs(ctx context.Context, limit int) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id FROM jobs INDEXED BY jobs_open
		WHERE state IN ('pending', 'running') AND paused_at IS NOT NULL ORDER BY paused_at, id LIMIT ?`, engine.PageSize(limit))
	if err != nil {
		return nil, fmt.Errorf("sqlite: paused jobs: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("sqlite: paused jobs: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: paused jobs: %w", err)
	}
	return ids, nil
}
