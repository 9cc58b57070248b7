// Package queuereaper deletes the work queues per type (warren.Policy.Queue)
// that nothing uses any more: each declares a work queue and one queue
// per retry tier, and without it they would outlive their jobs for ever.
//
// A queue is deleted once, for Config.Idle, no open job named it, it held
// no message and it had no consumer. RabbitMQ cannot delete a quorum
// queue only if it is empty and unused (queue.delete's if-empty and
// if-unused are not implemented for them), so the reaper does it in two
// sweeps: it first unbinds the idle queue from the jobs exchange, so that
// a task published to it is returned to its relay, which declares the
// queue again before it publishes once more; a sweep later it checks the
// queue again and deletes it, or binds it again when anything used it
// meanwhile. The default queue is never deleted.
//
// Each sweep also reads every known work queue's consumers, the default
// one's included while an open job names it, for the "no consumer" notice
// of a job (Config.Observe).
package queuereaper

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/protocol"
)

// DefaultInterval is Config.Interval's default.
const DefaultInterval = 15 * time.Second

// Config configures a Reaper. Queue names are protocol queue names
// ("gpu"), not the broker's (protocol.Names.WorkQueue).
type Config struct {
	// Idle is how long a work queue must go unused before it is deleted;
	// 0 or less never deletes one (the reaper still reads the queues'
	// consumers for Observe).
	Idle time.Duration
	// Interval is the time between sweeps; 0 means DefaultInterval. A
	// queue is deleted between Idle and Idle plus two intervals after its
	// last use.
	Interval time.Duration
	// Open returns the work queues of the open jobs
	// (store.Store.OpenQueues). Required. A sweep whose Open fails
	// deletes nothing.
	Open func(ctx context.Context) ([]string, error)
	// Depth reads work queue q's ready messages and consumers
	// (broker.Prober.Depth); a queue that does not exist is an error for
	// which broker.IsNotFound is true. Required.
	Depth func(q string) (broker.QueueDepth, error)
	// Unbind unbinds q from the jobs exchange (broker.UnbindWorkQueue).
	// Required when Idle is above 0.
	Unbind func(q string) error
	// Delete deletes q and its retry tiers if they are still idle
	// (broker.DeleteIdleWorkQueue). Required when Idle is above 0.
	Delete func(q string) (deleted bool, lost int, err error)
	// Declare declares q again, binding it back (broker.DeclareWorkQueue),
	// when it was used after it was unbound. Required when Idle is above
	// 0.
	Declare func(q string) error
	// Forget, when set, is called after q was unbound, deleted or bound
	// back, so that the local relay declares it again before it next
	// publishes to it (relay.Relay.Forget).
	Forget func(q string)
	// Observe, when set, is called with each depth the sweep reads, for
	// the jobs' "no consumer" notice (queuestats.Consumers.Observe). It
	// must not block.
	Observe func(q string, d broker.QueueDepth, at time.Time)
	// OnDeleted, when set, is called with each queue deleted. It must not
	// block.
	OnDeleted func(q string)
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger receives the reaper's logs; nil means slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Open == nil:
		return errors.New("queuereaper: Config.Open is required")
	case c.Depth == nil:
		return errors.New("queuereaper: Config.Depth is required")
	case c.Idle > 0 && (c.Unbind == nil || c.Delete == nil || c.Declare == nil):
		return errors.New("queuereaper: Config.Unbind, Delete and Declare are required when Config.Idle is above 0")
	}
	return nil
}

// queueState is what the reaper knows of one work queue.
type queueState struct {
	lastUsed time.Time
	unbound  bool // by the reaper, at a sweep after which nothing used it
}

// Reaper sweeps the work queues it knows of: those of the open jobs at
// each sweep and those passed to Note. It forgets a queue once it is
// deleted or found not to exist, and knows nothing of a queue that no
// job of its lifetime named: a queue whose jobs all closed while no
// server ran stays (warren topology delete removes an installation's).
type Reaper struct {
	cfg    Config
	mu     sync.Mutex
	queues map[string]*queueState
}

// New returns a reaper; it does nothing until Run or Sweep.
func New(cfg Config) (*Reaper, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Reaper{cfg: cfg, queues: make(map[string]*queueState)}, nil
}

// Note records that q was declared, and so bound, and is in use now (the
// relay is about to publish to it): the reaper knows of it, counts its
// idle time from now, and unbinds it again before it deletes it. The
// default queue is ignored.
func (r *Reaper) Note(q string) {
	if q == protocol.DefaultQueue || q == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.used(q, r.cfg.Now()).unbound = false
}

// used marks q in use at now; r.mu is held.
func (r *Reaper) used(q string, now time.Time) *queueState {
	st := r.queues[q]
	if st == nil {
		st = &queueState{}
		r.queues[q] = st
	}
	st.lastUsed = now
	return st
}

// Run sweeps every Config.Interval until ctx is done, then returns nil.
// A sweep's errors are logged.
func (r *Reaper) Run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		if err := r.Sweep(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Warn("queue reaper: sweep failed; trying again at the next", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Sweep looks at every known work queue once: it reads its depth, and
// unbinds, deletes or binds back those whose time has come. It returns
// Open's error, or the first error of a queue (the others are still
// swept).
func (r *Reaper) Sweep(ctx context.Context) error {
	open, err := r.cfg.Open(ctx)
	if err != nil {
		return err
	}
	now := r.cfg.Now()
	r.mu.Lock()
	for _, q := range open {
		if q != protocol.DefaultQueue {
			r.used(q, now)
		}
	}
	known := make([]string, 0, len(r.queues))
	for q := range r.queues {
		known = append(known, q)
	}
	r.mu.Unlock()
	slices.Sort(known)
	var first error
	if slices.Contains(open, protocol.DefaultQueue) && r.cfg.Observe != nil {
		// Never deleted, but its jobs may wait for a consumer too.
		d, err := r.cfg.Depth(protocol.DefaultQueue)
		if err == nil {
			r.cfg.Observe(protocol.DefaultQueue, d, now)
		}
		first = err
	}
	for _, q := range known {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := r.sweepQueue(q, slices.Contains(open, q), now); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// sweepQueue is Sweep's look at queue q, open when an open job names it.
func (r *Reaper) sweepQueue(q string, open bool, now time.Time) error {
	d, err := r.cfg.Depth(q)
	if broker.IsNotFound(err) {
		if !open {
			r.drop(q) // deleted by another server, or never declared
		}
		return nil
	}
	if err != nil {
		return err
	}
	if r.cfg.Observe != nil {
		r.cfg.Observe(q, d, now)
	}
	r.mu.Lock()
	st := r.queues[q]
	if st == nil { // dropped meanwhile
		r.mu.Unlock()
		return nil
	}
	if open || d.Ready > 0 || d.Consumers > 0 {
		st.lastUsed = now
	}
	idle, unbound := now.Sub(st.lastUsed), st.unbound
	r.mu.Unlock()
	switch {
	case r.cfg.Idle <= 0:
		return nil
	case idle <= 0 && unbound:
		return r.bindBack(q, "it was used after it was unbound")
	case idle < r.cfg.Idle:
		return nil
	case !unbound:
		if err := r.cfg.Unbind(q); err != nil {
			return err
		}
		r.setUnbound(q, true)
		if r.cfg.Forget != nil {
			r.cfg.Forget(q) // the local relay binds it back before it publishes to it
		}
		r.cfg.Logger.Debug("queue reaper: unbound an idle work queue; it is deleted at the next sweep unless something uses it", "queue", q)
		return nil
	}
	deleted, lost, err := r.cfg.Delete(q)
	if err != nil {
		return err
	}
	if !deleted {
		r.mu.Lock()
		if st := r.queues[q]; st != nil {
			st.lastUsed = now
		}
		r.mu.Unlock()
		return r.bindBack(q, "it held a message or had a consumer when it was to be deleted")
	}
	r.drop(q)
	if r.cfg.Forget != nil {
		r.cfg.Forget(q)
	}
	if lost > 0 {
		r.cfg.Logger.Error("queue reaper: deleting an idle work queue dropped messages published to it at that moment; the reconciler sends their tasks again",
			"queue", q, "messages", lost)
	}
	r.cfg.Logger.Info("queue reaper: deleted an idle work queue and its retry tiers", "queue", q, "idle", idle.Round(time.Second))
	if r.cfg.OnDeleted != nil {
		r.cfg.OnDeleted(q)
	}
	return nil
}

// bindBack declares q again after the reaper unbound it.
func (r *Reaper) bindBack(q, why string) error {
	if err := r.cfg.Declare(q); err != nil {
		return err
	}
	r.setUnbound(q, false)
	if r.cfg.Forget != nil {
		r.cfg.Forget(q)
	}
	r.cfg.Logger.Debug("queue reaper: bound a work queue back", "queue", q, "why", why)
	return nil
}

func (r *Reaper) setUnbound(q string, unbound bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st := r.queues[q]; st != nil {
		st.unbound = unbound
	}
}

func (r *Reaper) drop(q string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.queues, q)
}
