// Package aggregator consumes task results and dead-lettered tasks,
// records each task's terminal state exactly once in the job store, closes
// a job when completed + failed == expected (never from queue emptiness),
// and reduces its results in task id order.
package aggregator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/reduce"
	"github.com/warrenhq/warren/store"
)

// Defaults for Config.
const (
	DefaultBatchSize    = 256
	DefaultLinger       = 5 * time.Millisecond
	DefaultScanInterval = 5 * time.Second
	// DefaultMaxResultBytes is the largest reduced result a job may have
	// when Config.MaxResultBytes is 0.
	DefaultMaxResultBytes = 64 << 20
	// DefaultMaxInflightBytes bounds the message bytes the aggregator
	// holds when Config.MaxInflightBytes is 0: 512 MiB.
	DefaultMaxInflightBytes = 512 << 20
)

// Config configures an Aggregator.
type Config struct {
	// Store is the job store. Required.
	Store store.Store
	// Conn is the connection the aggregator consumes on; it opens its own
	// channels and does not close the connection. Required.
	Conn *amqp.Connection
	// Names are the exchange and queue names.
	Names protocol.Names
	// BatchSize is the most deliveries recorded in one store transaction
	// and acknowledged with one multiple-ack; 0 means DefaultBatchSize.
	BatchSize int
	// Linger is how long a batch waits for more deliveries after its first
	// one, when more than the first were already waiting (a lone result is
	// recorded at once); 0 means DefaultLinger.
	Linger time.Duration
	// ScanInterval is how often the aggregator looks for jobs that are
	// ready to close but were not closed (a crash between recording the
	// last result and closing); 0 means DefaultScanInterval.
	ScanInterval time.Duration
	// Reducers are the reducers jobs may name to reduce their results;
	// nil means reduce.NewRegistry(), the built-ins.
	Reducers *reduce.Registry
	// MaxResultBytes is the largest reduced result a job may have: a
	// larger one fails the job with an error saying so, rather than being
	// stored; 0 means DefaultMaxResultBytes.
	MaxResultBytes int
	// MaxMessageBytes is the largest result or dead-letter message the
	// aggregator takes; 0 means protocol.DefaultMaxMessageBytes. A larger
	// one is not read: it goes to the results dead-letter queue, and a
	// message that names its task exactly (a single result, a dead
	// letter's message id) fails that task at once.
	MaxMessageBytes int
	// MaxJobTasks is the most tasks a job may grow to by spawning
	// (protocol.Result.Spawn): a result whose spawn would take its job
	// over it is recorded failed, with an error that says so. 0 means no
	// limit.
	MaxJobTasks int64
	// MaxTaskBytes is the largest payload a spawned task may have: a
	// result with a larger one is recorded failed. 0 means no limit.
	MaxTaskBytes int64
	// KeepAttempts is how many attempts of each task the store keeps
	// (store.Outcome.KeepAttempts); 0 means store.DefaultKeepAttempts.
	KeepAttempts int
	// MaxInflightBytes bounds the message bytes the aggregator holds at
	// once, by bounding its prefetch: three quarters for results and a
	// quarter for dead letters, in messages of MaxMessageBytes, at most
	// twice BatchSize each; a batch is at most half of what both hold.
	// 0 means DefaultMaxInflightBytes.
	MaxInflightBytes int64
	// Logger receives logs; nil means slog.Default().
	Logger *slog.Logger
	// Hooks, when set, observe the aggregator (metrics and tests). They
	// must not block.
	Hooks Hooks
	// TracerProvider makes the spans of the recording of outcomes
	// (warren.aggregate) and of the closes (warren.job.close), in the
	// traces the result messages carry; nil means otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
}

// Hooks observe an aggregator. Every field is optional.
type Hooks struct {
	// OnBatch is called after each batch was committed and acknowledged.
	OnBatch func(size int, report store.ApplyReport)
	// OnOutcomes is called after each batch was committed, with the
	// outcomes it recorded (or found already recorded); it must not keep
	// the slice, which the next batch reuses.
	OnOutcomes func(outcomes []store.Outcome)
	// OnJobClosed is called after this aggregator closed a job.
	OnJobClosed func(jobID string, state warren.JobState)
	// OnJobFinished is called after this aggregator closed a job, before
	// OnJobClosed, with the job as the close read it (its type, creation
	// time and counters) and the state it was closed in, for the job
	// duration metric.
	OnJobFinished func(job warren.Job, state warren.JobState)
	// OnInvalid is called for each delivery dead-lettered as invalid.
	OnInvalid func(queue string, reason string)
	// OnDeadLetter is called for each dead-lettered task the aggregator
	// recorded (after its acknowledgement), with the routing key it was
	// dead-lettered with and the reason (a protocol Reason constant, or
	// the broker's x-death reason).
	OnDeadLetter func(routingKey, reason string)
	// OnUnknownReducer is called each time a job ready to close was left
	// open because its reducer is not in Config.Reducers.
	OnUnknownReducer func(jobID, reducer string)
	// OnReduceStarted is called after this aggregator started a job's
	// reduce task (store.StartReduce).
	OnReduceStarted func(jobID string)
	// OnFollowUp is called after this aggregator closed a job that
	// started its follow-up (store.Store.FinishJob, warren.Job.NextJob),
	// with the follow-up's id: a new job, pending with its tasks, or
	// closed as failed when the result could not make them. It is called
	// after OnJobClosed.
	OnFollowUp func(jobID, nextID string)
}

func (c Config) withDefaults() Config {
	if c.BatchSize <= 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.Linger <= 0 {
		c.Linger = DefaultLinger
	}
	if c.ScanInterval <= 0 {
		c.ScanInterval = DefaultScanInterval
	}
	if c.Reducers == nil {
		c.Reducers = reduce.NewRegistry()
	}
	if c.MaxResultBytes <= 0 {
		c.MaxResultBytes = DefaultMaxResultBytes
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = protocol.DefaultMaxMessageBytes
	}
	if c.MaxInflightBytes <= 0 {
		c.MaxInflightBytes = DefaultMaxInflightBytes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Store == nil:
		return errors.New("aggregator: Config.Store is required")
	case c.Conn == nil:
		return errors.New("aggregator: Config.Conn is required")
	case c.Names.ResultsQueue == "":
		return errors.New("aggregator: Config.Names is required (protocol.NamesFor(prefix))")
	case c.MaxInflightBytes < 2*int64(c.MaxMessageBytes):
		return fmt.Errorf("aggregator: Config.MaxInflightBytes (%d) must hold at least two messages of Config.MaxMessageBytes (%d)",
			c.MaxInflightBytes, c.MaxMessageBytes)
	}
	return nil
}

// Prefetch returns the prefetch of the aggregator's results and dead-letter
// consumers under cfg (see Config.MaxInflightBytes), and the most
// deliveries it records in one batch.
func Prefetch(cfg Config) (results, dead, batch int) {
	cfg = cfg.withDefaults()
	fit := func(bytes int64) int {
		return int(max(1, min(int64(2*cfg.BatchSize), bytes/int64(cfg.MaxMessageBytes))))
	}
	results, dead = fit(cfg.MaxInflightBytes*3/4), fit(cfg.MaxInflightBytes/4)
	return results, dead, max(1, min(cfg.BatchSize, (results+dead)/2))
}

// Aggregator records results and closes jobs.
type Aggregator struct {
	cfg   Config
	close chan closeRequest
	// batchSize is the most deliveries of one batch: Config.BatchSize, or
	// less when the prefetch that MaxInflightBytes allows is smaller.
	batchSize int

	// outcomes and from are process's buffers, reused batch after batch
	// (only the consuming goroutine uses them).
	outcomes []store.Outcome
	from     []int
	// unfinished is what the store last said of the jobs the batches
	// moved: their tasks not finished yet (noteUnfinished); held is
	// countHeld's count, per job, of the outcomes a batch holds. Only the
	// consuming goroutine uses them. endsJob says the batch in hand
	// holds a job's last outcomes (countHeld).
	unfinished map[string]int64
	held       map[string]int64
	endsJob    bool

	// testHookHeld, when set, is told the size of the batch in hand each
	// time it grows, so that tests know what the aggregator holds.
	testHookHeld func(n int)

	// unclosable holds the jobs ready to close whose reducer this
	// aggregator does not have: it cannot close them until it restarts
	// with a registry that has it, so its scan looks past them.
	unclosableMu sync.Mutex
	unclosable   map[string]bool
}

// New returns an aggregator; it does nothing until Run.
func New(cfg Config) (*Aggregator, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	_, _, batch := Prefetch(cfg)
	return &Aggregator{cfg: cfg, close: make(chan closeRequest, 1024), batchSize: batch,
		unfinished: map[string]int64{}, held: map[string]int64{}}, nil
}

// Run consumes results and dead letters until ctx is done and closes
// ready jobs. It returns nil after ctx is done (unacknowledged deliveries
// go back to their queues), or an error when the broker connection is
// lost.
func (a *Aggregator) Run(ctx context.Context) error {
	resultsPrefetch, deadPrefetch, _ := Prefetch(a.cfg)
	results, err := a.open(a.cfg.Names.ResultsQueue, false, resultsPrefetch)
	if err != nil {
		return err
	}
	defer func() { _ = results.ch.Close() }()
	dead, err := a.open(a.cfg.Names.DeadQueue, true, deadPrefetch)
	if err != nil {
		return err
	}
	defer func() { _ = dead.ch.Close() }()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.closer(ctx)
	}()
	err = a.consume(ctx, results, dead)
	cancel()
	wg.Wait()
	return err
}
