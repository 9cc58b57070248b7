// Package reconciler finds tasks that will never finish on their own — a
// task message lost, or a task stuck past its job's task timeout — and
// sends them back to the outbox, or, with no retries left, fails them as
// lost, so that every job still closes. It is bounded: each pass handles
// at most a batch of tasks per round and a task at most 1 + max_retries
// times, and several servers may run it at once.
//
// It acts only on tasks that show no sign of life. A task message waiting
// in a queue is one: behind a backlog a task may wait far longer than its
// task timeout, and nothing is lost. So each pass first asks the broker
// (Config.Busy) whether a task message waits, and a task is stale only
// when both its last publish and the last time a message was seen
// waiting are more than its job's task timeout plus a grace plus two
// intervals before now (store.Staleness; the intervals cover a message
// published and delivered between two checks). Every one of those times
// is read from the store's clock (store.Store.Now), which wrote the
// tasks' queued_at: servers whose clocks disagree judge alike. Once no
// message waits, a
// task is either held by a worker, whose run has the task timeout as its
// limit, or lost. (A worker that holds a task longer, prefetched behind
// slow tasks or later in a batch, is not seen: docs/failures.md.)
package reconciler

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/warrenhq/warren/store"
)

// Defaults for Config.
const (
	DefaultInterval  = 30 * time.Second
	DefaultBatchSize = 500
	// DefaultGrace is Config.Grace's default: time for a result to be
	// published and recorded after its run's deadline.
	DefaultGrace = time.Minute
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
	// Busy reports whether a task message waits in a queue (the work
	// queue, a retry tier, or an outcome not yet recorded): a sign of life
	// of the tasks behind it. Each pass asks it first; while it reports
	// true, and for their task timeout plus Grace plus two intervals
	// after, no task is stale. An error counts as true: with no sign either way, the
	// reconciler does nothing rather than republish a task that may be
	// waiting. nil means no queue is ever seen, so that each task's last
	// publish alone counts.
	Busy func(ctx context.Context) (bool, error)
	// Grace is added to every job's task timeout: time for a result to
	// be published and recorded after its run's deadline. 0 means
	// DefaultGrace.
	Grace time.Duration
	// OnRequeued, when set, is called after tasks went back to the outbox
	// (the server wakes the relay). It must not block.
	OnRequeued func(n int)
	// OnReadyToClose, when set, is called with each job that failing lost
	// tasks made ready to close (the server asks the aggregator to close
	// it). It must not block.
	OnReadyToClose func(jobID string)
	// OnPass, when set, is called after each pass that ran to its end,
	// with what it did (nothing, most of the time). It must not block.
	OnPass func(report store.ReconcileReport)
	// Logger receives logs; nil means slog.Default().
	Logger *slog.Logger
}

// Reconciler runs reconciliation passes.
type Reconciler struct {
	cfg Config

	// mu serialises passes; it guards what they learn of the queues.
	mu sync.Mutex
	// lastBusy is when the last check of the queues that counts as busy
	// (see staleness) ended: a task message may have waited until then.
	lastBusy time.Time
	// lastCheck is when the last check of the queues began.
	lastCheck time.Time
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
	if cfg.Grace < 0 {
		return nil, errors.New("reconciler: Config.Grace must be >= 0")
	}
	if cfg.Grace == 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Reconciler{cfg: cfg}, nil
}

// RunOnce runs one pass: it asks the broker whether a task message waits
// (Config.Busy), then runs store rounds until a round handles fewer tasks
// than a batch, at most as many rounds as it takes to see every task that
// was stale when the pass began. It returns what the pass did in total.
// Passes run one at a time.
func (r *Reconciler) RunOnce(ctx context.Context) (store.ReconcileReport, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var total store.ReconcileReport
	at, err := r.staleness(ctx)
	if err != nil {
		return total, err
	}
	for {
		rep, err := r.cfg.Store.ReconcileStale(ctx, at, r.cfg.BatchSize)
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
		// Handled tasks are no longer stale at at (requeued ones wait for
		// the relay's new queued_at), so the loop ends.
		if rep.Requeued+rep.Failed < r.cfg.BatchSize {
			break
		}
	}
	if total.Requeued+total.Failed > 0 {
		r.cfg.Logger.Warn("reconciler: tasks without a result past their task timeout",
			"requeued", total.Requeued, "failed_as_lost", total.Failed)
	}
	if r.cfg.OnPass != nil {
		r.cfg.OnPass(total)
	}
	return total, nil
}

// staleness checks the queues and returns what this pass judges tasks
// by. A check counts as busy when it sees a task message waiting, when it
// fails, when it is the first (nothing is known of the time before it),
// and when it ends more than maxGap() after the previous one began (a
// message published after that one and delivered before it was never
// seen). Then a task's message was delivered at most maxGap() after the
// later of its queued_at and lastBusy: by the first check after its
// queued_at, if that one saw nothing waiting, else by the first check
// after lastBusy's, which saw nothing. The grace is lengthened by as
// much. Every time is the store's (store.Store.Now), which fails only
// when the store cannot tell the time.
func (r *Reconciler) staleness(ctx context.Context) (store.Staleness, error) {
	if r.cfg.Busy == nil {
		now, err := r.cfg.Store.Now(ctx)
		return store.Staleness{Now: now, Grace: r.cfg.Grace}, err
	}
	began, err := r.cfg.Store.Now(ctx)
	if err != nil {
		return store.Staleness{}, err
	}
	busy, err := r.cfg.Busy(ctx)
	now, nowErr := r.cfg.Store.Now(ctx)
	if nowErr != nil {
		return store.Staleness{}, nowErr
	}
	if err != nil {
		r.cfg.Logger.Debug("reconciler: cannot see the queues; counting them busy", "error", err)
	}
	late := r.lastCheck.IsZero() || now.Sub(r.lastCheck) > r.maxGap()
	r.lastCheck = began
	if busy || err != nil || late {
		r.lastBusy = now
	}
	return store.Staleness{Now: now, Busy: r.lastBusy, Grace: r.cfg.Grace + r.maxGap()}, nil
}

// maxGap is the longest time from the start of one check of the queues
// to the end of the next that does not count as busy: two intervals,
// which a pass that takes less than one interval never reaches.
func (r *Reconciler) maxGap() time.Duration {
	return 2 * r.cfg.Interval
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
