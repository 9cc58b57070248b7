package aggregator

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/backoff"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/wire"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/store"
)

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
		// A batch that holds the last results of a job stops lingering:
		// someone may be waiting for that job's close, which this batch
		// makes.
		linger := time.NewTimer(a.cfg.Linger)
		for (busy || len(batch) > 1) && len(batch) < a.batchSize && !a.endsJob {
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

// maxUnfinished bounds the jobs whose unfinished tasks the aggregator
// remembers (unfinished); past it, it forgets them all and learns again.
const maxUnfinished = 10_000

// noteUnfinished remembers what the store said of the jobs a batch moved:
// how many of their tasks are not finished yet.
func (a *Aggregator) noteUnfinished(report store.ApplyReport) {
	if len(a.unfinished)+len(report.Unfinished) > maxUnfinished {
		clear(a.unfinished)
	}
	for id, n := range report.Unfinished {
		if n == 0 {
			delete(a.unfinished, id)
			continue
		}
		a.unfinished[id] = n
	}
}

// countHeld counts the outcomes of it, by its message id, toward its
// job, and notes when the batch in hand (held since the batch began)
// holds as many of a job's outcomes as the store last said it had
// unfinished: recording it will likely finish the job. A message id is
// a hint here, never trusted for anything else: a wrong one costs at
// most a linger. Each delivery is counted once, as it is held.
func (a *Aggregator) countHeld(it item) {
	if a.endsJob || len(a.unfinished) == 0 || it.d.RoutingKey == protocol.RoutingKeyAttempt {
		return // an attempt message finishes no task
	}
	job, n, ok := outcomesOf(it.d.MessageId)
	if !ok {
		return
	}
	want, known := a.unfinished[job]
	if !known {
		return
	}
	a.held[job] += n
	a.endsJob = a.held[job] >= want
}

// outcomesOf reads a result or dead-lettered task message's id: its job
// and how many tasks it carries ("<job>:<task>" or "<job>:<first>+<n>").
func outcomesOf(id string) (string, int64, bool) {
	i := strings.LastIndexByte(id, ':')
	if i <= 0 {
		return "", 0, false
	}
	job, tasks := id[:i], id[i+1:]
	if j := strings.IndexByte(tasks, '+'); j >= 0 {
		n, err := strconv.ParseInt(tasks[j+1:], 10, 64)
		return job, n, err == nil && n > 0
	}
	return job, 1, true
}

// hold adds it to the batch in hand.
func (a *Aggregator) hold(batch []item, it item) []item {
	if len(batch) == 0 {
		clear(a.held)
		a.endsJob = false
	}
	batch = append(batch, it)
	a.countHeld(it)
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
			for k := n; k < len(outcomes); k++ {
				a.limitSpawn(&outcomes[k])
				outcomes[k].KeepAttempts = a.cfg.KeepAttempts
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
	a.noteUnfinished(report)
	for _, c := range report.ClosedJobs {
		a.closedInline(ctx, c, traced.spanContext(c.Job.ID))
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
	r.ClosedJobs = append(r.ClosedJobs, second.ClosedJobs...)
	if r.Unfinished == nil {
		r.Unfinished = map[string]int64{}
	}
	maps.Copy(r.Unfinished, second.Unfinished)
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
		report, err := a.cfg.Store.ApplyOutcomesClosing(ctx, outcomes, a.decideInline)
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
	switch {
	case it.src.dead:
		kind = "dead-letter"
		jobID, ids = wire.TaskMessageIDs(it.d.MessageId)
	case it.d.RoutingKey == protocol.RoutingKeyAttempt:
		kind = "attempt" // a retried run's: its task is still open, and fails nothing
	default:
		if job, task, err := protocol.ParseMessageID(it.d.MessageId); err == nil {
			jobID, ids = job, []int64{task}
		}
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

// limitSpawn gives outcome o, when it spawns, this server's limits for
// the store to apply (Config.MaxJobTasks, Config.MaxTaskBytes), and fails
// it when a spawned payload is nested deeper than a task message may
// carry (protocol.MaxPayloadDepth): its task could never be read.
func (a *Aggregator) limitSpawn(o *store.Outcome) {
	if len(o.Spawn) == 0 || o.State != warren.TaskCompleted {
		return
	}
	o.MaxJobTasks, o.MaxTaskBytes = a.cfg.MaxJobTasks, a.cfg.MaxTaskBytes
	for i, p := range o.Spawn {
		if d := protocol.Depth(p); d > protocol.MaxPayloadDepth {
			o.State, o.Result, o.Spawn = warren.TaskFailed, nil, nil
			o.SpawnRun, o.SpawnPart, o.SpawnParts = "", 0, 0 // the run fails now, whatever its other parts hold
			o.Error = fmt.Sprintf("spawn refused: spawned task %d's payload is nested %d levels deep, more than the protocol's %d", i, d, protocol.MaxPayloadDepth)
			return
		}
	}
}

// resultOutcome is the outcome a result records.
func resultOutcome(r protocol.Result) store.Outcome {
	o := store.Outcome{
		JobID:      r.JobID,
		TaskID:     r.TaskID,
		State:      warren.TaskCompleted,
		Result:     r.Result,
		Spawn:      r.Spawn,
		SpawnRun:   r.SpawnRun,
		SpawnPart:  r.SpawnPart,
		SpawnParts: r.SpawnParts,
		Attempts:   r.Attempt,
		Worker:     r.Worker,
		StartedAt:  r.StartedAt,
		FinishedAt: r.FinishedAt,
		Traceback:  r.Traceback,
	}
	if r.Status == protocol.StatusRetried {
		// A run that failed and is retried: recorded as an attempt only.
		o.State, o.Retry = warren.TaskFailed, true
		o.Result, o.Spawn, o.SpawnRun, o.SpawnPart, o.SpawnParts = nil, nil, "", 0, 0
		o.Error = r.Error
	}
	if r.Failed() {
		o.State = warren.TaskFailed
		o.Result, o.Spawn = nil, nil
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
		Worker: dl.Worker, FinishedAt: &finished, Generation: dl.Generation, Traceback: dl.Traceback}
	if !dl.StartedAt.IsZero() {
		started := dl.StartedAt
		o.StartedAt = &started
	}
	return o
}
