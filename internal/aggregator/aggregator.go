// Package aggregator consumes task results and dead-lettered tasks,
// records each task's terminal state exactly once in the job store, closes
// a job when completed + failed == expected (never from queue emptiness),
// and reduces its results in task id order.
package aggregator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/backoff"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/wire"
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
	return &Aggregator{cfg: cfg, close: make(chan closeRequest, 1024), batchSize: batch}, nil
}

// source is one consumed queue on its own channel: multiple-acks are per
// channel, and deliveries of one channel arrive in tag order.
type source struct {
	queue      string
	dead       bool // dead-lettered tasks rather than results
	ch         *amqp.Channel
	deliveries <-chan amqp.Delivery
}

// item is one delivery of a batch with what it decoded to.
type item struct {
	src     *source
	d       amqp.Delivery
	invalid string // why the delivery can never be applied
	reason  string // why a dead-lettered task failed
	// trace is the trace context the delivery carries: the span that
	// published it (wire.Trace).
	trace trace.SpanContext
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

func (a *Aggregator) open(queue string, dead bool, prefetch int) (*source, error) {
	ch, deliveries, err := broker.Consume(a.cfg.Conn, queue, "", prefetch)
	if err != nil {
		return nil, fmt.Errorf("aggregator: %w", err)
	}
	return &source{queue: queue, dead: dead, ch: ch, deliveries: deliveries}, nil
}

func (a *Aggregator) consume(ctx context.Context, results, dead *source) error {
	batch := make([]item, 0, a.batchSize)
	var lastBatch time.Time
	for {
		batch = batch[:0]
		// Wait for the first delivery of a batch.
		first, ok, err := a.next(ctx, results, dead, nil)
		if !ok {
			return err
		}
		batch = a.hold(batch, first)
		// Take what is already here. Waiting for more is worth it only
		// when results are flowing: more came with the first one, or the
		// last batch was recorded less than a linger ago. A lone result
		// after a quiet spell is recorded at once.
		busy := time.Since(lastBatch) < a.cfg.Linger
		for len(batch) < a.batchSize {
			it, ok, err := a.poll(results, dead)
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			batch = a.hold(batch, it)
		}
		linger := time.NewTimer(a.cfg.Linger)
		for (busy || len(batch) > 1) && len(batch) < a.batchSize {
			it, ok, err := a.next(ctx, results, dead, linger.C)
			if err != nil {
				linger.Stop()
				return err
			}
			if !ok {
				break
			}
			batch = a.hold(batch, it)
		}
		linger.Stop()
		pctx, cancel := a.batchContext(ctx)
		err = a.process(pctx, batch)
		cancel()
		lastBatch = time.Now()
		if err != nil {
			if ctx.Err() != nil {
				return nil // not acked: the broker redelivers
			}
			return err
		}
		if ctx.Err() != nil {
			return nil // the last batch was flushed
		}
	}
}

// hold adds it to the batch in hand.
func (a *Aggregator) hold(batch []item, it item) []item {
	batch = append(batch, it)
	if a.testHookHeld != nil {
		a.testHookHeld(len(batch))
	}
	return batch
}

// FlushTimeout bounds how long a stopping aggregator spends recording the
// batch it holds, so that a shutdown leaves as little as possible to be
// redelivered.
const FlushTimeout = 10 * time.Second

// batchContext is ctx while the aggregator runs; once ctx is done, a
// context that outlives it by at most FlushTimeout, to flush the batch
// already taken.
func (a *Aggregator) batchContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Err() == nil {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(context.WithoutCancel(ctx), FlushTimeout)
}

// poll returns a delivery that either source already holds, without
// waiting; ok is false when there is none (err nil) or a channel closed
// (err set).
func (a *Aggregator) poll(results, dead *source) (item, bool, error) {
	select {
	case d, ok := <-results.deliveries:
		return results.item(d, ok)
	case d, ok := <-dead.deliveries:
		return dead.item(d, ok)
	default:
		return item{}, false, nil
	}
}

// next returns the next delivery from either source. ok is false when
// timeout fired or ctx is done (err nil), or when a channel closed (err
// set).
func (a *Aggregator) next(ctx context.Context, results, dead *source, timeout <-chan time.Time) (item, bool, error) {
	select {
	case d, ok := <-results.deliveries:
		return results.item(d, ok)
	case d, ok := <-dead.deliveries:
		return dead.item(d, ok)
	case <-timeout:
		return item{}, false, nil
	case <-ctx.Done():
		return item{}, false, nil
	}
}

// item wraps a delivery received from s; ok false means s's channel
// closed.
func (s *source) item(d amqp.Delivery, ok bool) (item, bool, error) {
	if !ok {
		return item{}, false, fmt.Errorf("aggregator: consumer of %q closed", s.queue)
	}
	return item{src: s, d: d}, true, nil
}

// process records one batch in ONE store transaction (more, when the
// store refuses part of it: see record), dead-letters what can never be
// applied, then acknowledges the rest with one multiple-ack per channel,
// and queues the jobs the batch made ready for closing.
func (a *Aggregator) process(ctx context.Context, batch []item) error {
	outcomes := a.outcomes[:0]
	from := a.from[:0] // outcome index -> batch index
	for i := range batch {
		n := len(outcomes)
		if size := len(batch[i].d.Body); size > a.cfg.MaxMessageBytes {
			outcomes, batch[i].invalid = tooLarge(outcomes, batch[i], size, a.cfg.MaxMessageBytes)
		} else {
			var err error
			outcomes, batch[i].reason, err = decode(outcomes, batch[i])
			if err != nil {
				batch[i].invalid = err.Error()
				continue
			}
			batch[i].trace = wire.Trace(batch[i].d)
		}
		for range len(outcomes) - n {
			from = append(from, i)
		}
	}
	// Keep the buffers for the next batch, without what they point to.
	defer func() {
		clear(outcomes)
		a.outcomes, a.from = outcomes[:0], from[:0]
	}()
	traced := a.startSpans(batch, outcomes, from)
	report, err := a.record(ctx, batch, outcomes, from)
	if err != nil {
		traced.end(err)
		return err
	}
	for _, idx := range report.Unknown {
		batch[from[idx]].invalid = "unknown job or task " + protocol.MessageID(outcomes[idx].JobID, outcomes[idx].TaskID)
	}
	if err := a.acknowledge(batch); err != nil {
		traced.end(err)
		return err
	}
	traced.end(nil)
	if a.cfg.Hooks.OnOutcomes != nil {
		a.cfg.Hooks.OnOutcomes(outcomes)
	}
	if a.cfg.Hooks.OnBatch != nil {
		a.cfg.Hooks.OnBatch(len(batch), report)
	}
	if a.cfg.Hooks.OnDeadLetter != nil {
		for _, it := range batch {
			if it.src.dead && it.invalid == "" {
				a.cfg.Hooks.OnDeadLetter(it.d.RoutingKey, it.reason)
			}
		}
	}
	for _, id := range report.ReadyToClose {
		a.requestClose(closeRequest{id: id, trace: traced.spanContext(id)})
	}
	return nil
}

// record applies outcomes, the outcomes of batch (outcome k decoded from
// delivery from[k]), and returns what the store did, Unknown indexing
// outcomes. The error is ctx's: a store that does not answer is retried
// until ctx is done.
//
// A store that refuses the batch (an error store.Transient does not call
// transient: the data is at fault, and would be every time) must not stop
// the aggregator: isolate records it in parts and sets aside the
// deliveries the store refuses.
func (a *Aggregator) record(ctx context.Context, batch []item, outcomes []store.Outcome, from []int) (store.ApplyReport, error) {
	report, err := a.apply(ctx, outcomes)
	if err == nil || ctx.Err() != nil {
		return report, err
	}
	a.cfg.Logger.Warn("aggregator: the store refused a batch; recording it in parts to set aside what it refuses",
		"error", err, "deliveries", len(batch), "outcomes", len(outcomes))
	return a.isolate(ctx, batch, outcomes, from, err)
}

// isolate records outcomes, which the store refused with refusal, in two
// parts split between deliveries (or, within one delivery, a result
// batch, between its outcomes), each in its own transaction, and each
// part that the store refuses again in two parts, down to single
// outcomes: everything the store takes is recorded, and a delivery with
// an outcome it refuses alone is marked invalid with the store's error,
// to be dead-lettered whole for people to see, its refused tasks left to
// the reconciler. Nothing is acknowledged before every part is committed.
// The error is ctx's.
func (a *Aggregator) isolate(ctx context.Context, batch []item, outcomes []store.Outcome, from []int, refusal error) (store.ApplyReport, error) {
	if len(outcomes) == 1 {
		batch[from[0]].invalid = "the store refused it: " + refusal.Error()
		return store.ApplyReport{}, nil
	}
	mid := split(from)
	var report store.ApplyReport
	for _, part := range [][2]int{{0, mid}, {mid, len(outcomes)}} {
		lo, hi := part[0], part[1]
		r, err := a.apply(ctx, outcomes[lo:hi])
		if err != nil && ctx.Err() == nil {
			r, err = a.isolate(ctx, batch, outcomes[lo:hi], from[lo:hi], err)
		}
		if err != nil {
			return store.ApplyReport{}, err
		}
		report = merge(report, r, lo)
	}
	return report, nil
}

// split returns where to cut two outcomes or more (outcome k decoded
// from delivery from[k]) in two: near the middle, between two deliveries
// if they come from several.
func split(from []int) int {
	mid := len(from) / 2
	if from[0] == from[len(from)-1] {
		return mid
	}
	for mid > 0 && from[mid-1] == from[mid] {
		mid--
	}
	if mid == 0 {
		for from[mid] == from[0] {
			mid++
		}
	}
	return mid
}

// merge returns the report of a batch recorded in parts, r so far and
// then the part whose outcomes start at index offset of the batch's.
func merge(r, second store.ApplyReport, offset int) store.ApplyReport {
	r.Applied += second.Applied
	r.AppliedFailed += second.AppliedFailed
	r.Duplicates += second.Duplicates
	r.Closed += second.Closed
	for _, idx := range second.Unknown {
		r.Unknown = append(r.Unknown, idx+offset)
	}
	for _, id := range second.ReadyToClose {
		if !slices.Contains(r.ReadyToClose, id) {
			r.ReadyToClose = append(r.ReadyToClose, id)
		}
	}
	return r
}

// storeRetryPolicy is the backoff between attempts to record a batch in a
// store that does not answer.
var storeRetryPolicy = backoff.Policy{Min: 50 * time.Millisecond, Max: 5 * time.Second}

// apply records outcomes in one store transaction. It retries a store
// that does not answer (store.Transient) until it answers or ctx is done:
// a store outage pauses the aggregator, and nothing is acknowledged
// meanwhile. Any other error is returned: the store refused the outcomes.
func (a *Aggregator) apply(ctx context.Context, outcomes []store.Outcome) (store.ApplyReport, error) {
	if len(outcomes) == 0 {
		return store.ApplyReport{}, nil
	}
	retry := backoff.New(storeRetryPolicy)
	for {
		report, err := a.cfg.Store.ApplyOutcomes(ctx, outcomes)
		if err == nil {
			return report, nil
		}
		if ctx.Err() != nil {
			return store.ApplyReport{}, ctx.Err()
		}
		if !store.Transient(err) {
			return store.ApplyReport{}, err
		}
		wait := retry.Next()
		a.cfg.Logger.Warn("aggregator: recording a batch failed; retrying", "error", err, "batch", len(outcomes), "backoff", wait)
		if !backoff.Sleep(ctx, wait) {
			return store.ApplyReport{}, ctx.Err()
		}
	}
}

// acknowledge rejects (dead-letters) invalid deliveries one by one, then
// acks everything else of each channel with one multiple-ack.
func (a *Aggregator) acknowledge(batch []item) error {
	last := map[*source]uint64{}
	for _, it := range batch {
		if it.invalid != "" {
			a.cfg.Logger.Warn("aggregator: dead-lettering a message that can never be applied",
				"queue", it.src.queue, "message_id", it.d.MessageId, "reason", it.invalid)
			// The queue dead-letters to the results dead-letter queue.
			if err := it.d.Nack(false, false); err != nil {
				return fmt.Errorf("aggregator: reject: %w", err)
			}
			if a.cfg.Hooks.OnInvalid != nil {
				a.cfg.Hooks.OnInvalid(it.src.queue, it.invalid)
			}
			continue
		}
		last[it.src] = max(last[it.src], it.d.DeliveryTag)
	}
	for src, tag := range last {
		if err := src.ch.Ack(tag, true); err != nil {
			return fmt.Errorf("aggregator: ack on %q: %w", src.queue, err)
		}
	}
	return nil
}

// decode appends the task outcomes of a delivery to outcomes (one, or
// each task's of a batch), with the failure reason of a dead-lettered
// task. On an error, outcomes is returned as it was.
func decode(outcomes []store.Outcome, it item) ([]store.Outcome, string, error) {
	if it.src.dead {
		return decodeDead(outcomes, wire.ReadDeadLetter(it.d))
	}
	rs, err := wire.ReadResults(it.d)
	if err != nil {
		return outcomes, "", err
	}
	generation := wire.Generation(it.d)
	for _, r := range rs {
		o := resultOutcome(r)
		o.Generation = generation
		outcomes = append(outcomes, o)
	}
	return outcomes, "", nil
}

// tooLarge returns why it, a delivery of size bytes, is over the limit of
// the messages the aggregator reads, and appends to outcomes, without
// reading its body, the failure of each task its message id names
// exactly: a single result's <job_id>:<task_id>, or a dead letter's,
// which is its task message's (TaskMessageIDs). The id of a result batch
// names the first of its tasks and their count, not which tasks they
// are (a failed task of the batch is not among them), so its tasks are
// left to the reconciler. The delivery itself is dead-lettered.
func tooLarge(outcomes []store.Outcome, it item, size, limit int) ([]store.Outcome, string) {
	kind := "result"
	var (
		jobID string
		ids   []int64
	)
	if it.src.dead {
		kind = "dead-letter"
		jobID, ids = wire.TaskMessageIDs(it.d.MessageId)
	} else if job, task, err := protocol.ParseMessageID(it.d.MessageId); err == nil {
		jobID, ids = job, []int64{task}
	}
	why := fmt.Sprintf("the %s message is %d bytes, over this server's limit of %d (--max-message-bytes)", kind, size, limit)
	now := time.Now().UTC()
	for _, id := range ids {
		outcomes = append(outcomes, store.Outcome{
			JobID: jobID, TaskID: id, State: warren.TaskFailed, Generation: wire.Generation(it.d), FinishedAt: &now,
			Error: why + "; it was not read, and is kept in the results dead-letter queue",
		})
	}
	return outcomes, why
}

// resultOutcome is the outcome a result records.
func resultOutcome(r protocol.Result) store.Outcome {
	o := store.Outcome{
		JobID:      r.JobID,
		TaskID:     r.TaskID,
		State:      warren.TaskCompleted,
		Result:     r.Result,
		Attempts:   r.Attempt,
		Worker:     r.Worker,
		StartedAt:  r.StartedAt,
		FinishedAt: r.FinishedAt,
	}
	if r.Failed() {
		o.State = warren.TaskFailed
		o.Result = nil
		o.Error = r.Error
		if o.Error == "" {
			o.Error = "failed (no error given)"
		}
	}
	if o.FinishedAt == nil {
		now := time.Now().UTC()
		o.FinishedAt = &now
	}
	return o
}

// decodeDead appends the failed outcomes of a dead-lettered task message
// (single, or every task of a batch the broker dead-lettered) to outcomes,
// with its reason. A dead letter whose body is not a task message fails
// the tasks it can still be told to be for (wire.DeadLetter.TaskIDs) at
// once, rather than leave them to be failed as lost after their timeouts;
// one that names none is an error. On an error, outcomes is returned as
// it was.
func decodeDead(outcomes []store.Outcome, dl wire.DeadLetter) ([]store.Outcome, string, error) {
	o := deadOutcome(dl)
	if dl.Malformed != nil {
		if len(dl.TaskIDs) == 0 {
			return outcomes, "", dl.Malformed
		}
		o.Error = unreadableError(dl)
		for _, id := range dl.TaskIDs {
			o.JobID, o.TaskID = dl.JobID, id
			outcomes = append(outcomes, o)
		}
		return outcomes, dl.Reason, nil
	}
	for _, t := range dl.Tasks {
		o.JobID, o.TaskID = t.JobID, t.TaskID
		outcomes = append(outcomes, o)
	}
	return outcomes, dl.Reason, nil
}

// unreadableError is the error of a task failed by a dead letter whose
// body is not a task message: why, and what the worker or the broker
// said, when it said more.
func unreadableError(dl wire.DeadLetter) string {
	msg := "the dead letter could not be read (" + dl.Malformed.Error() + ")"
	if dl.Error == "" || dl.Error == dl.Malformed.Error() {
		return msg
	}
	return msg + ": " + dl.TaskError()
}

// deadOutcome is the failed outcome, without job and task, that dead
// letter dl records. A dead letter that does not say when it failed
// failed now, as far as the store can tell.
func deadOutcome(dl wire.DeadLetter) store.Outcome {
	finished := dl.FailedAt
	if finished.IsZero() {
		finished = time.Now().UTC()
	}
	o := store.Outcome{State: warren.TaskFailed, Error: dl.TaskError(), Attempts: dl.Attempts(),
		Worker: dl.Worker, FinishedAt: &finished, Generation: dl.Generation}
	if !dl.StartedAt.IsZero() {
		started := dl.StartedAt
		o.StartedAt = &started
	}
	return o
}

// RequestClose asks the aggregator to close a job that is ready to close
// (for example one whose last task the reconciler failed). It never
// blocks: when its queue is full, the periodic scan finds the job.
func (a *Aggregator) RequestClose(id string) { a.requestClose(closeRequest{id: id}) }

// closeRequest is a job to close, and the span of the recording that made
// it ready, which its close span continues (invalid when none did).
type closeRequest struct {
	id    string
	trace trace.SpanContext
}

// requestClose queues a job for the closer without blocking the consumer;
// if the queue is full, the periodic scan finds the job.
func (a *Aggregator) requestClose(r closeRequest) {
	select {
	case a.close <- r:
	default:
	}
}

// closer closes jobs handed to it and, periodically, those the store says
// are ready (left half-closed by a crash, or missed).
func (a *Aggregator) closer(ctx context.Context) {
	a.scan(ctx)
	tick := time.NewTicker(a.cfg.ScanInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-a.close:
			if err := a.CloseJob(trace.ContextWithSpanContext(ctx, r.trace), r.id); err != nil && ctx.Err() == nil {
				a.cfg.Logger.Error("aggregator: closing job failed; the scan retries it", "job_id", r.id, "error", err)
			}
		case <-tick.C:
			a.scan(ctx)
		}
	}
}

// scanWindow is how many jobs ready to close one scan asks the store for,
// beyond those this aggregator cannot close.
const scanWindow = 100

// maxUnclosable bounds how many jobs this aggregator remembers it cannot
// close; past it, the scan's window may fill with them again.
const maxUnclosable = 10_000

// scan closes the jobs the store says are ready, looking past those
// whose reducer this aggregator does not have (reported once each).
func (a *Aggregator) scan(ctx context.Context) {
	a.unclosableMu.Lock()
	skip := len(a.unclosable)
	a.unclosableMu.Unlock()
	ids, err := a.cfg.Store.JobsToClose(ctx, scanWindow+skip)
	if err != nil {
		if ctx.Err() == nil {
			a.cfg.Logger.Warn("aggregator: looking for jobs to close failed", "error", err)
		}
		return
	}
	a.forgetClosedElsewhere(ids, len(ids) < scanWindow+skip)
	for _, id := range ids {
		if a.isUnclosable(id) {
			continue
		}
		if err := a.CloseJob(ctx, id); err != nil && ctx.Err() == nil {
			a.cfg.Logger.Error("aggregator: closing job failed", "job_id", id, "error", err)
		}
	}
}

// markUnclosable remembers that job id cannot be closed here; it reports
// whether the job is new to the set.
func (a *Aggregator) markUnclosable(id string) bool {
	a.unclosableMu.Lock()
	defer a.unclosableMu.Unlock()
	if a.unclosable[id] || len(a.unclosable) >= maxUnclosable {
		return !a.unclosable[id]
	}
	if a.unclosable == nil {
		a.unclosable = map[string]bool{}
	}
	a.unclosable[id] = true
	return true
}

func (a *Aggregator) isUnclosable(id string) bool {
	a.unclosableMu.Lock()
	defer a.unclosableMu.Unlock()
	return a.unclosable[id]
}

// forgetClosedElsewhere drops the unclosable jobs the store no longer
// lists as ready (another server closed them, or they were cancelled or
// reopened), when ids is every job ready to close.
func (a *Aggregator) forgetClosedElsewhere(ids []string, complete bool) {
	if !complete {
		return
	}
	ready := make(map[string]bool, len(ids))
	for _, id := range ids {
		ready[id] = true
	}
	a.unclosableMu.Lock()
	defer a.unclosableMu.Unlock()
	for id := range a.unclosable {
		if !ready[id] {
			delete(a.unclosable, id)
		}
	}
}

// closeTries bounds how often CloseJob starts over when the job changed
// between its read and its finish. A job that keeps changing (results
// still arriving for a fail-fast job, replays in a row) is left to the
// periodic scan.
const closeTries = 5

// CloseJob closes a job that is ready to close: completed, with its
// reduced result, when its failures are within tolerance, else failed. It
// is idempotent and safe to run from several aggregators at once: exactly
// one of them closes the job; it returns nil when the job was already
// closed or is not ready.
//
// The close applies only to the job as it was read: when the job changed
// meanwhile (an outcome, a redrive, a replay, the reconciler), the store's
// FinishJob refuses it and CloseJob reads the job again and starts over,
// at most closeTries times; then it returns an error and the scan tries
// later.
//
// Each try that finds the job ready makes a warren.job.close span, a
// child of the span in ctx when there is one.
func (a *Aggregator) CloseJob(ctx context.Context, id string) error {
	for range closeTries {
		again, err := a.closeOnce(ctx, id)
		if err != nil || !again {
			return err
		}
	}
	return fmt.Errorf("aggregator: job %s changed under each of %d closes; the scan tries again", id, closeTries)
}

// closeOnce is one try of CloseJob. again says the job changed after it
// was read, and the close was not applied.
func (a *Aggregator) closeOnce(ctx context.Context, id string) (again bool, err error) {
	job, err := a.cfg.Store.GetJob(ctx, id)
	if err != nil {
		return false, err
	}
	if job.State.Terminal() || !store.ReadyToClose(job) {
		return false, nil
	}
	ctx, span := a.startClose(ctx, job)
	defer func() { endClose(span, again, err) }()
	state, result, msg := warren.JobCompleted, []byte(nil), ""
	if !job.Policy.Tolerates(job.FailedTasks, job.ExpectedTasks) {
		state = warren.JobFailed
		msg = fmt.Sprintf("%d of %d tasks failed, over the tolerance", job.FailedTasks, job.ExpectedTasks)
	} else {
		var refused error
		result, refused, err = a.reduce(ctx, job)
		switch {
		case errors.Is(err, reduce.ErrUnknownReducer):
			if !a.markUnclosable(id) {
				return false, nil // reported already
			}
			a.cfg.Logger.Warn("aggregator: the job's reducer is not registered on this server; the job stays open for a server that has it",
				"job_id", id, "reducer", reducerName(job), "error", err)
			if a.cfg.Hooks.OnUnknownReducer != nil {
				a.cfg.Hooks.OnUnknownReducer(id, reducerName(job))
			}
			return false, nil
		case err != nil:
			return false, err
		case refused != nil:
			state, result, msg = warren.JobFailed, nil, refused.Error()
		case len(result) > a.cfg.MaxResultBytes:
			state, msg = warren.JobFailed, fmt.Sprintf("the reduced result is %d bytes, over the limit of %d bytes", len(result), a.cfg.MaxResultBytes)
			result = nil
		}
	}
	closed, err := a.cfg.Store.FinishJob(ctx, id, job.Version, state, result, msg)
	if err != nil {
		return false, fmt.Errorf("aggregator: finish job %s: %w", id, err)
	}
	if !closed {
		return true, nil // changed since the read, or closed by another: read it again
	}
	a.cfg.Logger.Info("job closed", "job_id", id, "state", state,
		"completed", job.CompletedTasks, "failed", job.FailedTasks, "expected", job.ExpectedTasks)
	closedSpan(span, state, msg)
	if a.cfg.Hooks.OnJobFinished != nil {
		a.cfg.Hooks.OnJobFinished(job, state)
	}
	if a.cfg.Hooks.OnJobClosed != nil {
		a.cfg.Hooks.OnJobClosed(id, state)
	}
	return false, nil
}

// reduce runs the job's reducer over its results. refused is the reducer
// refusing them (a *reduce.Error, or a result it cannot make): the job
// fails with it. err is what leaves the job open instead: a reducer this
// server does not know (it wraps reduce.ErrUnknownReducer), or the store
// failing while the results were scanned (a connection reset, a
// timeout), which the next close retries.
func (a *Aggregator) reduce(ctx context.Context, job warren.Job) (result []byte, refused, err error) {
	var storeErr error
	result, err = a.cfg.Reducers.Reduce(reducerName(job), func(fn func(taskID int64, failed bool, result json.RawMessage) error) error {
		var fnErr error
		err := a.cfg.Store.ScanResults(ctx, job.ID, func(taskID int64, state warren.TaskState, result json.RawMessage) error {
			fnErr = fn(taskID, state != warren.TaskCompleted, result)
			return fnErr
		})
		// ScanResults returns fn's error as it is; any other is the store's.
		if err != nil && (fnErr == nil || !errors.Is(err, fnErr)) {
			storeErr = err
		}
		return err
	})
	switch {
	case storeErr != nil:
		return nil, nil, fmt.Errorf("aggregator: scan the results of job %s: %w", job.ID, storeErr)
	case errors.Is(err, reduce.ErrUnknownReducer):
		return nil, nil, err
	case err != nil:
		return nil, err, nil
	}
	return result, nil, nil
}

// reducerName is the name of job's reducer.
func reducerName(job warren.Job) string {
	if job.Policy.Reduce == "" {
		return reduce.Default
	}
	return job.Policy.Reduce
}
