// Package retention deletes closed jobs once their retention has passed:
// each job with its tasks, its reduced result and its idempotency key.
//
// A sweep (RunOnce) never holds the store long. It deletes expired jobs'
// rows a batch at a time (store.Store.DeleteExpiredJobs: JobBatch jobs,
// one short transaction), then purges their task rows a batch at a time
// (PurgeDeletedTasks: TaskBatch rows, one short transaction each), with a
// pause after every transaction, so that the API, the relay and the
// aggregator get the store in between: on SQLite, where every write waits
// for the one writer, a purge transaction of 5,000 task rows holds it for
// 15 to 25 ms on a 2-core machine. Several servers on one PostgreSQL store
// may sweep at once: the store never hands a job or a task row to two of
// them.
package retention

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
	// DefaultInterval is the time between sweeps.
	DefaultInterval = time.Minute
	// DefaultJobBatch is how many expired jobs one transaction deletes.
	DefaultJobBatch = 500
	// DefaultTaskBatch is how many task rows of deleted jobs one
	// transaction purges.
	DefaultTaskBatch = 5000
	// DefaultPause is the pause after each transaction of a sweep.
	DefaultPause = 100 * time.Millisecond
)

// Config configures a Sweeper.
type Config struct {
	// Store is the job store. Required.
	Store store.Store
	// Retention is how long a closed job without a retention of its own
	// (warren.Policy.Retention 0) is kept; zero or negative keeps such
	// jobs forever. A job's own retention applies whatever Retention is.
	Retention time.Duration
	// Interval is the time between sweeps; 0 means DefaultInterval.
	Interval time.Duration
	// JobBatch is the most jobs deleted per transaction; 0 means
	// DefaultJobBatch.
	JobBatch int
	// TaskBatch is the most task rows purged per transaction; 0 means
	// DefaultTaskBatch.
	TaskBatch int
	// Pause is how long a sweep waits after each of its transactions, so
	// that others get the store; 0 means DefaultPause.
	Pause time.Duration
	// OnDeleted, when set, is called after each transaction that deleted
	// expired jobs, with how many. It must not block.
	OnDeleted func(jobs int)
	// OnPurged, when set, is called after each transaction that purged
	// task rows of deleted jobs, with how many. It must not block.
	OnPurged func(tasks int)
	// OnSweep, when set, is called after each sweep that ran to its end,
	// with what it did (nothing, most of the time). It must not block.
	OnSweep func(Report)
	// Logger receives logs; nil means slog.Default().
	Logger *slog.Logger
}

// Report says what a sweep did.
type Report struct {
	// Jobs counts the expired jobs it deleted.
	Jobs int
	// Tasks counts the task rows of deleted jobs it purged: those of the
	// jobs it deleted, and those of jobs deleted before (DELETE
	// /v1/jobs/{id}, or a sweep that stopped).
	Tasks int
	// Took is how long the sweep took, pauses included.
	Took time.Duration
}

// Sweeper runs retention sweeps.
type Sweeper struct {
	cfg  Config
	mu   sync.Mutex // one sweep at a time
	wake chan struct{}
}

// New returns a sweeper; it does nothing until Run or RunOnce.
func New(cfg Config) (*Sweeper, error) {
	if cfg.Store == nil {
		return nil, errors.New("retention: Config.Store is required")
	}
	if cfg.Interval < 0 || cfg.JobBatch < 0 || cfg.TaskBatch < 0 || cfg.Pause < 0 {
		return nil, errors.New("retention: Config.Interval, JobBatch, TaskBatch and Pause must be >= 0")
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.JobBatch == 0 {
		cfg.JobBatch = DefaultJobBatch
	}
	if cfg.TaskBatch == 0 {
		cfg.TaskBatch = DefaultTaskBatch
	}
	if cfg.Pause == 0 {
		cfg.Pause = DefaultPause
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Sweeper{cfg: cfg, wake: make(chan struct{}, 1)}, nil
}

// RunOnce runs one sweep: it purges the task rows deleted jobs left, then
// deletes the jobs expired at the sweep's start a batch at a time, each
// batch's task rows purged before the next, until a batch finds none. The
// sweep's start is the store's clock (store.Store.Now), which wrote the
// jobs' finished_at: servers whose clocks disagree expire jobs alike. It
// returns what it did, also when it stopped at an error or when ctx was
// done. Sweeps run one at a time.
func (s *Sweeper) RunOnce(ctx context.Context) (Report, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	start := time.Now()
	var r Report
	now, err := s.cfg.Store.Now(ctx)
	if err == nil {
		err = s.sweep(ctx, store.Expiry{Now: now, Retention: s.cfg.Retention}, &r)
	}
	r.Took = time.Since(start)
	if r.Jobs+r.Tasks > 0 {
		s.cfg.Logger.Info("retention: swept closed jobs past their retention",
			"jobs_deleted", r.Jobs, "tasks_purged", r.Tasks, "took", r.Took.Round(time.Millisecond))
	}
	if err != nil {
		return r, err
	}
	if s.cfg.OnSweep != nil {
		s.cfg.OnSweep(r)
	}
	return r, nil
}

// sweep does RunOnce's work at at, adding it to r.
func (s *Sweeper) sweep(ctx context.Context, at store.Expiry, r *Report) error {
	for {
		if err := s.purge(ctx, r); err != nil {
			return err
		}
		n, err := s.cfg.Store.DeleteExpiredJobs(ctx, at, s.cfg.JobBatch)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		r.Jobs += n
		if s.cfg.OnDeleted != nil {
			s.cfg.OnDeleted(n)
		}
		if err := s.pause(ctx); err != nil {
			return err
		}
	}
}

// purge purges task rows of deleted jobs a batch at a time, pausing after
// each batch, until a batch purges fewer than TaskBatch.
func (s *Sweeper) purge(ctx context.Context, r *Report) error {
	for {
		n, err := s.cfg.Store.PurgeDeletedTasks(ctx, s.cfg.TaskBatch)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		r.Tasks += n
		if s.cfg.OnPurged != nil {
			s.cfg.OnPurged(n)
		}
		if err := s.pause(ctx); err != nil {
			return err
		}
		if n < s.cfg.TaskBatch {
			return nil
		}
	}
}

// pause waits Config.Pause, or returns ctx's error when ctx is done first.
func (s *Sweeper) pause(ctx context.Context) error {
	t := time.NewTimer(s.cfg.Pause)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Wake makes a running sweeper sweep now rather than at its next
// interval (after a job was deleted through the API, so that its tasks
// are purged soon). It never blocks; wakes while a sweep runs make one
// more sweep.
func (s *Sweeper) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Run sweeps at once, then every Interval and whenever woken, until ctx
// is done; then it returns nil. A sweep that fails is logged, and the
// next one tries again.
func (s *Sweeper) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		if _, err := s.RunOnce(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("retention: sweep failed; the next one tries again", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-s.wake:
		}
	}
}
