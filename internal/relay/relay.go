// Package relay is warren's outbox relay: it publishes the task rows that
// the store holds as pending, with publisher confirms and mandatory
// routing, and marks them queued only after the broker confirmed them. A
// crash between a publish and its mark causes at most a duplicate task
// message (which the aggregator absorbs), never a lost task.
package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warrenhq/warren/internal/backoff"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/wire"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/store"
)

// Defaults for Config.
const (
	DefaultBatchSize    = 500
	DefaultConcurrency  = 2
	DefaultPollInterval = 250 * time.Millisecond
)

// Config configures a Relay.
type Config struct {
	// Store holds the outbox. Required.
	Store store.Store
	// Publisher publishes the task messages; the relay does not close it.
	// Required.
	Publisher *broker.Publisher
	// Names are the exchange and queue names.
	Names protocol.Names
	// BatchSize is the most tasks claimed and published per store round
	// trip; 0 means DefaultBatchSize. The publisher's confirm window bounds
	// how many of them wait for confirms at once.
	BatchSize int
	// Concurrency is how many rounds (claim, publish, wait for the
	// confirms, mark) Run keeps going at once, so that one round's
	// publishing overlaps another's store work; 0 means
	// DefaultConcurrency. A store that serialises RelayBatch (SQLite)
	// runs one round at a time whatever this says.
	Concurrency int
	// PollInterval is how long an idle relay waits before looking for new
	// tasks when nobody calls Wake; 0 means DefaultPollInterval.
	PollInterval time.Duration
	// Logger receives the relay's logs; nil means slog.Default().
	Logger *slog.Logger
	// OnPublished, when set, is called after each batch with the number of
	// tasks marked queued. It must not block.
	OnPublished func(n int)
}

func (c Config) withDefaults() Config {
	if c.BatchSize <= 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Store == nil:
		return errors.New("relay: Config.Store is required")
	case c.Publisher == nil:
		return errors.New("relay: Config.Publisher is required")
	case c.Names.JobsExchange == "":
		return errors.New("relay: Config.Names is required (protocol.NamesFor(prefix))")
	}
	return nil
}

// retryPolicy is the backoff between rounds that failed (store or broker
// errors).
var retryPolicy = backoff.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second}

// Relay moves tasks from the store's outbox to the broker.
type Relay struct {
	cfg  Config
	wake []chan struct{} // one per loop of Run
}

// New returns a relay; it does nothing until Run.
func New(cfg Config) (*Relay, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &Relay{cfg: cfg, wake: make([]chan struct{}, cfg.Concurrency)}
	for i := range r.wake {
		r.wake[i] = make(chan struct{}, 1)
	}
	return r, nil
}

// Wake makes an idle relay look for pending tasks now, for example right
// after a job was created. It never blocks.
func (r *Relay) Wake() {
	for _, w := range r.wake {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

// Run publishes pending tasks until ctx is done, then returns nil, with
// Config.Concurrency loops of rounds. Store and broker errors are logged
// and retried with backoff; it returns an error only when the publisher is
// closed for good.
func (r *Relay) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(r.wake))
	for _, wake := range r.wake {
		go func() {
			err := r.loop(ctx, wake)
			cancel() // one loop's end is every loop's
			errs <- err
		}()
	}
	var first error
	for range r.wake {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// loop runs rounds until ctx is done (nil) or the publisher is closed for
// good, waiting for wake or the poll interval when the outbox is empty.
func (r *Relay) loop(ctx context.Context, wake <-chan struct{}) error {
	retry := backoff.New(retryPolicy)
	for {
		_, claimed, err := r.relayOnce(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			select {
			case <-r.cfg.Publisher.Done():
				return fmt.Errorf("relay: publisher closed: %w", err)
			default:
			}
			wait := retry.Next()
			r.cfg.Logger.Warn("relay: batch failed; retrying", "error", err, "backoff", wait)
			if !backoff.Sleep(ctx, wait) {
				return nil
			}
			continue
		}
		retry.Reset()
		if claimed == r.cfg.BatchSize {
			continue // more may be waiting
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-time.After(r.cfg.PollInterval):
		}
	}
}

// RelayOnce claims one batch of pending tasks, publishes them, waits for
// their confirms and marks the confirmed ones queued. It returns how many
// were marked. Tasks that were not confirmed stay pending and are tried
// again by a later call; if none was confirmed, the first error is
// returned.
func (r *Relay) RelayOnce(ctx context.Context) (int, error) {
	n, _, err := r.relayOnce(ctx)
	return n, err
}

// relayOnce is RelayOnce, also returning how many tasks the store offered.
func (r *Relay) relayOnce(ctx context.Context) (marked, claimed int, err error) {
	n, err := r.cfg.Store.RelayBatch(ctx, r.cfg.BatchSize, func(ctx context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		claimed = len(tasks)
		return r.publish(ctx, tasks)
	})
	if err != nil {
		return 0, claimed, err
	}
	if n > 0 && r.cfg.OnPublished != nil {
		r.cfg.OnPublished(n)
	}
	return n, claimed, nil
}

func (r *Relay) publish(ctx context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
	groups := group(tasks)
	if last := groups[len(groups)-1]; len(tasks) == r.cfg.BatchSize && len(groups) > 1 && len(last) < last[0].BatchSize {
		// The claim cut the last batch short and more tasks are
		// waiting: leave it pending, to go out whole with the next claim.
		groups = groups[:len(groups)-1]
	}
	confs := make([]*broker.Confirmation, 0, len(groups))
	var firstErr error
	for _, g := range groups {
		out, err := r.message(g)
		if err != nil {
			// A row that cannot be encoded is a bug in the store, not a
			// broker problem; skip it loudly rather than block the outbox.
			r.cfg.Logger.Error("relay: cannot encode task", "job_id", g[0].JobID, "task_id", g[0].TaskID, "tasks", len(g), "error", err)
			confs = append(confs, nil)
			continue
		}
		c, err := r.cfg.Publisher.Publish(ctx, out.Exchange, out.Key, out.Msg)
		if err != nil {
			firstErr = err
			break // the channel is gone or ctx is done: wait for what is out
		}
		confs = append(confs, c)
	}
	confirmed := make([]store.TaskRef, 0, len(tasks))
	for i, c := range confs {
		if c == nil {
			continue
		}
		if err := c.Wait(ctx); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		for _, t := range groups[i] {
			confirmed = append(confirmed, t.Ref())
		}
	}
	if len(confirmed) == 0 && firstErr != nil {
		return nil, firstErr
	}
	if firstErr != nil {
		r.cfg.Logger.Warn("relay: some tasks were not confirmed; they stay pending",
			"confirmed", len(confirmed), "claimed", len(tasks), "error", firstErr)
	}
	return confirmed, nil
}

// group splits outbox tasks, in the order the store returns them, into
// the groups that go out as one message each: runs of consecutive tasks
// of one job, with the same attempts and generation (the message carries
// one of each), of at most the job's batch size. A job with batch size 1
// gets one group per task.
func group(tasks []store.OutboxTask) [][]store.OutboxTask {
	groups := make([][]store.OutboxTask, 0, len(tasks))
	for i := 0; i < len(tasks); {
		size := min(max(tasks[i].BatchSize, 1), protocol.MaxBatchSize)
		j := i + 1
		for j < len(tasks) && j-i < size && tasks[j].JobID == tasks[i].JobID &&
			tasks[j].Attempts == tasks[i].Attempts && tasks[j].Generation == tasks[i].Generation &&
			tasks[j].TaskID > tasks[j-1].TaskID {
			j++
		}
		groups = append(groups, tasks[i:j:j])
		i = j
	}
	return groups
}

// message returns the task message of a group from group: a single task
// message for one task, else a task batch message. The group's tasks
// share their job, type, attempts, generation and retry budget.
func (r *Relay) message(g []store.OutboxTask) (wire.Outbound, error) {
	m := wire.TaskMessage{JobID: g[0].JobID, Type: g[0].Type, Retries: g[0].Attempts, MaxRetries: g[0].MaxRetries,
		Generation: g[0].Generation, Tasks: make([]protocol.BatchTask, len(g))}
	for i, t := range g {
		m.Tasks[i] = protocol.BatchTask{TaskID: t.TaskID, Payload: t.Payload}
	}
	return wire.Tasks(r.cfg.Names, m)
}

// BacklogCollector is a Prometheus collector of warren_relay_backlog: the
// number of tasks waiting in the store's outbox, read at each scrape. A
// scrape whose store query fails reports the error instead of a number.
type BacklogCollector struct {
	store store.Store
	desc  *prometheus.Desc
}

// NewBacklogCollector returns the backlog collector of st.
func NewBacklogCollector(st store.Store) *BacklogCollector {
	return &BacklogCollector{store: st, desc: prometheus.NewDesc("warren_relay_backlog",
		"Tasks written but not yet published (the outbox).", nil, nil)}
}

// Describe implements prometheus.Collector.
func (c *BacklogCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *BacklogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := c.store.Backlog(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n))
}
