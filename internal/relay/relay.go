// Package relay is warren's outbox relay: it publishes the task rows that
// the store holds as pending, with publisher confirms and mandatory
// routing, and marks them queued only after the broker confirmed them. A
// crash between a publish and its mark causes at most a duplicate task
// message (which the aggregator absorbs), never a lost task.
//
// A task whose message can never be published (the broker refuses it,
// too large for its max_message_size, or it cannot be encoded) is failed
// in the store with the reason, so that its job closes and the jobs
// behind it in the outbox are not held up.
package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenhq/warren/internal/backoff"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/spans"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/store"
)

// Defaults for Config.
const (
	DefaultBatchSize    = 2000
	DefaultConcurrency  = 2
	DefaultPollInterval = 250 * time.Millisecond
	// DefaultMaxMessageBytes is 4 MiB: well under RabbitMQ 4's default
	// max_message_size (16 MiB; 3.x: 128 MiB).
	DefaultMaxMessageBytes = 4 << 20
	// DefaultWindow is Config.Window's default, in messages.
	DefaultWindow = 1000
	// windowPoll is how long a relay whose window is full waits before it
	// reads the work queue's depth again.
	windowPoll = 10 * time.Millisecond
)

// Config configures a Relay.
type Config struct {
	// Store holds the outbox. Required.
	Store store.Store
	// Publisher publishes the task messages; the relay does not close it.
	// Required.
	Publisher Publisher
	// Names are the exchange and queue names.
	Names protocol.Names
	// BatchSize is the most tasks claimed and published per store round
	// trip; 0 means DefaultBatchSize. The publisher's confirm window
	// bounds how many of them wait for confirms at once.
	BatchSize int
	// MaxRoundBytes, when above 0, bounds the payload bytes one round
	// claims (store.Round.Bytes): what a round holds in memory, at most
	// twice over while it encodes them.
	MaxRoundBytes int64
	// Concurrency is how many rounds (claim, publish, wait for the
	// confirms, mark) Run keeps going at once, so that one round's
	// publishing overlaps another's store work; 0 means
	// DefaultConcurrency. A store that serialises RelayBatch (SQLite)
	// runs one round at a time whatever this says.
	Concurrency int
	// PollInterval is how long an idle relay waits before looking for new
	// tasks when nobody calls Wake; 0 means DefaultPollInterval.
	PollInterval time.Duration
	// MaxMessageBytes bounds the body of a task message: a job's batches
	// (batch_size) are cut short to stay under it. A single task whose
	// message is larger still is published alone, on a channel of its
	// own, so that a broker that refuses it (over its max_message_size)
	// closes only that channel; refused MaxRefusals times in a row, the
	// task is failed. Keep it at or below the broker's max_message_size.
	// 0 means DefaultMaxMessageBytes.
	MaxMessageBytes int
	// Window is how many task messages the relay keeps ready in each work
	// queue at most, ahead of the workers: it publishes only what brings
	// the queue's ready messages (Depth) up to Window, shared between the
	// queue's open jobs by priority (store.Store.RelayRound), and leaves
	// the rest of the backlog in the store. A small job submitted behind a big one
	// thus waits behind at most Window messages. 0 means DefaultWindow; it
	// applies only when Depth is set.
	Window int
	// Depth, when set, returns the messages ready in work queue q (a
	// protocol queue name, for broker.Prober.Depth of
	// Names.WorkQueue(q)) and its consumers; nil means no window: every
	// pending task is published as fast as the broker confirms it. An
	// error is logged and the round goes on as if the queue were empty.
	Depth func(q string) (broker.QueueDepth, error)
	// Sizer, when set, chooses the batch size of the jobs that leave it
	// to warren (warren.Policy.BatchSize 0) in each round; nil means one
	// task per message for them.
	Sizer Sizer
	// Declare, when set, declares work queue q other than the default one
	// (broker.DeclareWorkQueue) before the relay first publishes to it; a
	// job's queue exists once its first task is out, whether or not a
	// worker consumes it yet. nil means the queues exist.
	Declare func(q string) error
	// Logger receives the relay's logs; nil means slog.Default().
	Logger *slog.Logger
	// OnPublished, when set, is called after each batch with the number of
	// tasks marked queued. It must not block.
	OnPublished func(n int)
	// OnMessages, when set, is called after each round with the number
	// of tasks in each message the broker confirmed. It must not block or
	// keep the slice.
	OnMessages func(tasks []int)
	// OnFailed, when set, is called with the number of tasks the relay
	// failed because their message cannot be published. It must not
	// block.
	OnFailed func(n int)
	// OnReadyToClose, when set, is called with each job that failing such
	// tasks made ready to close. It must not block.
	OnReadyToClose func(jobID string)
	// TracerProvider makes the spans of the publishings
	// (warren.relay.publish), each in the trace its job was submitted in;
	// nil means otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
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
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.Window <= 0 {
		c.Window = DefaultWindow
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
	case c.MaxMessageBytes < 0:
		return fmt.Errorf("relay: Config.MaxMessageBytes must be >= 0, got %d", c.MaxMessageBytes)
	}
	return nil
}

// Sizer chooses batch sizes; *autobatch.Sizer is the one the server
// gives.
type Sizer interface {
	// Size returns the batch size of job j in a round, and the most of
	// its tasks the round may take (store.Round.Batch): j.Pending is how
	// many tasks it has pending, or at least that many when atLeast, and
	// consumers is how many consumers its work queue had when the round
	// read the queue's depth (0 when unknown).
	Size(j store.PendingJob, atLeast bool, consumers int) (size, most int)
}

// Publisher publishes task messages with publisher confirms;
// *broker.Publisher is the one the server gives.
type Publisher interface {
	// Publish sends msg and returns its confirmation, as
	// broker.Publisher.Publish does.
	Publish(ctx context.Context, exchange, key string, msg amqp.Publishing) (*broker.Confirmation, error)
	// PublishAlone sends msg on a channel of its own and waits for its
	// confirm, as broker.Publisher.PublishAlone does.
	PublishAlone(ctx context.Context, exchange, key string, msg amqp.Publishing) error
	// Done is closed once the publisher cannot publish any more.
	Done() <-chan struct{}
}

// retryPolicy is the backoff between rounds that failed (store or broker
// errors).
var retryPolicy = backoff.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second}

// Relay moves tasks from the store's outbox to the broker.
type Relay struct {
	cfg    Config
	tracer trace.Tracer
	wake   []chan struct{} // one per loop of Run
	// freed, one per loop of Run, says that a held job's outcome freed
	// room (Recorded): a loop waiting for room in a full work queue
	// looks at the queue again rather than run a round at once.
	freed []chan struct{}
	// inflight is how many task messages the loops have claimed and not
	// yet published, by work queue: the queue's depth does not show them
	// yet, so a round's room leaves them out.
	inflightMu sync.Mutex
	inflight   map[string]int
	// consumers is each work queue's consumers at its last depth reading.
	consumers sync.Map
	// declared holds the work queues Declare declared; a failed round
	// forgets them, in case one was deleted.
	declared sync.Map
	// held holds the jobs whose concurrency cap held tasks back in a
	// round (store.Round.Held), and heldJobs how many: a recorded outcome
	// of one wakes the relay (Recorded), and the outcomes of other jobs
	// cost one atomic load while none is held. Each entry holds the
	// round that last held the job back (rounds counts them): a job that
	// closed on another server, whose outcomes this one never records,
	// is dropped once no round held it for heldRounds rounds.
	held     sync.Map // job id: round
	heldJobs atomic.Int64
	rounds   atomic.Uint64
}

// heldRounds is how many rounds a job stays among the held ones after the
// last round that held it back (Relay.held).
const heldRounds = 1024

// New returns a relay; it does nothing until Run.
func New(cfg Config) (*Relay, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &Relay{cfg: cfg, tracer: spans.Tracer(cfg.TracerProvider), wake: make([]chan struct{}, cfg.Concurrency),
		freed: make([]chan struct{}, cfg.Concurrency), inflight: map[string]int{}}
	for i := range r.wake {
		r.wake[i] = make(chan struct{}, 1)
		r.freed[i] = make(chan struct{}, 1)
	}
	return r, nil
}

// Wake makes an idle relay look for pending tasks now, for example right
// after a job was created. It never blocks.
func (r *Relay) Wake() { signal(r.wake) }

// signal pings each of chans without blocking.
func signal(chans []chan struct{}) {
	for _, c := range chans {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// Recorded tells the relay that outcomes were recorded: when one belongs
// to a job whose concurrency cap (warren.Policy.MaxConcurrency) held
// tasks back in a round, its tasks freed room, and the relay wakes (Wake)
// to let the next ones out now rather than at its next poll (a loop
// waiting for room in a full work queue only looks at the queue again:
// the freed tasks need room there too). Outcomes of other jobs do not
// wake it. It never blocks.
func (r *Relay) Recorded(outcomes []store.Outcome) {
	if r.heldJobs.Load() == 0 {
		return
	}
	woken := false
	for _, o := range outcomes {
		if _, ok := r.held.LoadAndDelete(o.JobID); ok {
			r.heldJobs.Add(-1)
			if !woken {
				signal(r.freed)
				woken = true
			}
		}
	}
}

// ForgetJob drops job jobID from the jobs whose cap held tasks back: it
// closed, and no outcome of it will free room.
func (r *Relay) ForgetJob(jobID string) {
	if _, ok := r.held.LoadAndDelete(jobID); ok {
		r.heldJobs.Add(-1)
	}
}

// hold remembers that job jobID's cap held tasks back in round
// (store.Round.Held).
func (r *Relay) hold(jobID string, round uint64) {
	if _, loaded := r.held.Swap(jobID, round); !loaded {
		r.heldJobs.Add(1)
	}
}

// pruneHeld drops the jobs no round held back since heldRounds before
// round, every heldRounds rounds.
func (r *Relay) pruneHeld(round uint64) {
	if round%heldRounds != 0 || r.heldJobs.Load() == 0 {
		return
	}
	r.held.Range(func(id, last any) bool {
		if last.(uint64)+heldRounds < round && r.held.CompareAndDelete(id, last) {
			r.heldJobs.Add(-1)
		}
		return true
	})
}

// Run publishes pending tasks until ctx is done, then returns nil, with
// Config.Concurrency loops of rounds. Store and broker errors are logged
// and retried with backoff; it returns an error only when the publisher is
// closed for good.
func (r *Relay) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(r.wake))
	for i, wake := range r.wake {
		go func() {
			err := r.loop(ctx, wake, r.freed[i])
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
func (r *Relay) loop(ctx context.Context, wake, freed <-chan struct{}) error {
	retry := backoff.New(retryPolicy)
	for {
		_, claimed, full, err := r.relayOnce(ctx)
		for len(full) > 0 && err == nil {
			// Tasks wait in the store for room in the work queues: look
			// at the queues alone until one has room, or a new job
			// (Wake) may bring a queue of its own.
			select {
			case <-ctx.Done():
				return nil
			case <-wake:
				full = nil
			case <-freed:
				if !r.stillFull(full) {
					full = nil
				}
			case <-time.After(windowPoll):
				if !r.stillFull(full) {
					full = nil
				}
			}
			if full == nil {
				_, claimed, full, err = r.relayOnce(ctx)
			}
		}
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
		if claimed > 0 {
			continue // more may be waiting
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-freed:
		case <-time.After(r.cfg.PollInterval):
		}
	}
}

// RelayOnce claims one batch of pending tasks, publishes them, waits for
// their confirms and marks the confirmed ones queued. It returns how many
// were marked. Tasks that were not confirmed stay pending and are tried
// again by a later call; if none was confirmed, the first error is
// returned. Tasks whose message can never be published are failed in the
// store (see Config.MaxMessageBytes).
func (r *Relay) RelayOnce(ctx context.Context) (int, error) {
	n, _, _, err := r.relayOnce(ctx)
	return n, err
}

// relayOnce is RelayOnce, also returning how many tasks the store offered
// and, when it offered none because every work queue with jobs waiting
// had too little room, those queues.
func (r *Relay) relayOnce(ctx context.Context) (marked, claimed int, full []string, err error) {
	seq := r.rounds.Add(1)
	r.pruneHeld(seq)
	round := store.Round{Messages: r.cfg.BatchSize, Tasks: r.cfg.BatchSize, Bytes: r.cfg.MaxRoundBytes,
		Held: func(jobID string) { r.hold(jobID, seq) }}
	if r.cfg.Sizer != nil {
		round.Batch = func(j store.PendingJob) (int, int) {
			consumers, _ := r.consumers.Load(j.Queue)
			n, _ := consumers.(int)
			return r.cfg.Sizer.Size(j, j.More, n)
		}
	}
	roomy := false
	if r.cfg.Depth != nil {
		round.Room = func(q string) int {
			room := r.room(q)
			if room == 0 {
				full = append(full, q)
			} else {
				roomy = true
			}
			return room
		}
	}
	var (
		failed []failure
		sizes  []int
	)
	n, err := r.cfg.Store.RelayRound(ctx, round, func(ctx context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		claimed = len(tasks)
		groups := hold(group(tasks, r.cfg.MaxMessageBytes))
		counts := queueMessages(groups)
		r.addInflight(counts, 1)
		defer r.addInflight(counts, -1)
		for q := range counts {
			if err := r.declare(q); err != nil {
				return nil, err
			}
		}
		rd := r.publish(ctx, groups)
		if rd.err != nil {
			r.declared.Clear() // a returned task may be a deleted queue's
		}
		failed, sizes = rd.failed, rd.sizes
		return rd.result(r.cfg.Logger, len(tasks))
	})
	// Only now: on PostgreSQL, RelayBatch holds the claimed rows locked
	// until it returns, and failing a task writes its row.
	failErr := r.fail(ctx, failed)
	if err != nil {
		r.declared.Clear()
		return 0, claimed, nil, err
	}
	if n > 0 && r.cfg.OnPublished != nil {
		r.cfg.OnPublished(n)
	}
	if n > 0 && r.cfg.OnMessages != nil {
		r.cfg.OnMessages(sizes)
	}
	if claimed > 0 || roomy {
		full = nil
	}
	return n, claimed, full, failErr
}

// stillFull reports whether every one of queues still has too little room
// for a round.
func (r *Relay) stillFull(queues []string) bool {
	for _, q := range queues {
		if r.room(q) > 0 {
			return false
		}
	}
	return true
}

// queueMessages counts, by work queue, the messages of groups (group's).
func queueMessages(groups [][]store.OutboxTask) map[string]int {
	counts := map[string]int{}
	for _, g := range groups {
		counts[protocol.QueueOrDefault(g[0].Queue)]++
	}
	return counts
}

// addInflight adds sign times counts to the messages in flight by queue.
func (r *Relay) addInflight(counts map[string]int, sign int) {
	r.inflightMu.Lock()
	defer r.inflightMu.Unlock()
	for q, n := range counts {
		r.inflight[q] += sign * n
	}
}

// declare declares work queue q with Config.Declare the first time the
// relay publishes to it (the default queue is the topology's).
func (r *Relay) declare(q string) error {
	if r.cfg.Declare == nil || q == protocol.DefaultQueue {
		return nil
	}
	if _, ok := r.declared.Load(q); ok {
		return nil
	}
	if err := r.cfg.Declare(q); err != nil {
		return fmt.Errorf("relay: declare work queue %q: %w", q, err)
	}
	r.declared.Store(q, true)
	return nil
}

// ForgetQueue makes the relay declare work queue q again (Config.Declare)
// before it next publishes to it: the queue reaper calls it once it
// deleted or unbound q. It never blocks.
func (r *Relay) ForgetQueue(q string) { r.declared.Delete(q) }

// room is how many messages the round may send to work queue q: what
// brings its ready messages (and the tasks other rounds are publishing to
// it) up to Window, or 0 when that is less than half the window or a
// full round (BatchSize), whichever is less: too little for a round worth
// its store round trip. The queue still holds the other half for the
// workers meanwhile.
func (r *Relay) room(q string) int {
	if err := r.declare(q); err != nil {
		r.cfg.Logger.Warn("relay: cannot declare a work queue; its jobs wait", "queue", q, "error", err)
		return 0
	}
	depth, err := r.cfg.Depth(q)
	if err != nil {
		r.cfg.Logger.Warn("relay: cannot read a work queue's depth; publishing as if it were empty", "queue", q, "error", err)
		depth = broker.QueueDepth{}
	}
	r.consumers.Store(q, depth.Consumers)
	r.inflightMu.Lock()
	room := r.cfg.Window - depth.Ready - r.inflight[q]
	r.inflightMu.Unlock()
	if room < max(1, min(r.cfg.Window/2, r.cfg.BatchSize)) {
		return 0
	}
	return room
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
