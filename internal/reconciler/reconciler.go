// Package reconciler finds tasks that will never finish on their own — a
// task message lost, or a task stuck past its job's task timeout — and
// sends them back to the outbox, or, with no retries left, fails them as
// lost, so that every job still closes. It is bounded: each pass handles
// at most a batch of tasks per round and a task at most 1 + max_retries
// times, and several servers may run it at once.
package reconciler

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/warrenhq/warren/store"
)

// Defaults for Config.
const (
	DefaultInterval  = 30 * time.Second
	DefaultBatchSize = 500
)

// Config configures a Reconciler.
type Config struct {
	// Store is the job store. Required.
	Store store.Store
	// Interval is the time between passes; 0 means DefaultInterval.
	Interval time.Duration
	// BatchSize is the most tasks handled per store round trip; 0 means
	// DefaultBatchSize.
	BatchSize int
	// Now returns the current time; nil means time.Now. Tests inject a
	// clock.
	Now func() time.Time
	// OnRequeued, when set, is called after tasks went back to the outbox
	// (the server wakes the relay). It must not block.
	OnRequeued func(n int)
	// OnReadyToClose, when set, is called with each job that failing lost
	// tasks made ready to close (the server asks the aggregator to close
	// it). It must not block.
	OnReadyToClose func(jobID string)
	// Logger receives logs; nil means slog.Default().
	Logger *slog.Logger
}

// Reconciler runs reconciliation passes.
type Reconciler struct {
	cfg Config
}

// New returns a reconciler; it does nothing until Run or RunOnce.
func New(cfg Config) (*Reconciler, error) {
	if cfg.Store == nil {
		return nil, errors.New("reconciler: Config.Store is required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Reconciler{cfg: cfg}, nil
}

// RunOnce runs one pass: store rounds until a round handles fewer tasks
// than a batch, at most as many rounds as it takes to see every task that
// was stale when the pass began. It returns what the pass did in total.
func (r *Reconciler) RunOnce(ctx context.Context) (store.ReconcileReport, error) {
	var total store.ReconcileReport
	now := r.cfg.Now()
	for {
		rep, err := r.cfg.Store.ReconcileStale(ctx, store.Staleness{Now: now}, r.cfg.BatchSize)
		if err != nil {
			return total, err
		}
		total.Requeued += rep.Requeued
		total.Failed += rep.Failed
		total.ReadyToClose = append(total.ReadyToClose, rep.ReadyToClose...)
		if rep.Requeued > 0 && r.cfg.OnRequeued != nil {
			r.cfg.OnRequeued(rep.Requeued)
		}
		if r.cfg.OnReadyToClose != nil {
			for _, id := range rep.ReadyToClose {
				r.cfg.OnReadyToClose(id)
			}
		}
		// Handled tasks are no longer stale at now (requeued ones wait for
		// the relay's new queued_at), so the loop ends.
		if rep.Requeued+rep.Failed < r.cfg.BatchSize {
			break
		}
	}
	if total.Requeued+total.Failed > 0 {
		r.cfg.Logger.Warn("reconciler: tasks without a result past their task timeout",
			"requeued", total.Requeued, "failed_as_lost", total.Failed)
	}
	return total, nil
}

// Run runs a pass every Interval until ctx is done, then returns nil.
// Store errors are logged and the next pass tries again.
func (r *Reconciler) Run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		if _, err := r.RunOnce(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Warn("reconciler: pass failed; the next one tries again", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
