package worker

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/outcome"
	"github.com/warrenhq/warren/protocol"
)

// confirmTimeout bounds the wait for one publish's confirm; a publish not
// confirmed by then counts as failed and the task runs again.
const confirmTimeout = 30 * time.Second

// Bounds of the pause before a task whose outcome could not be published
// goes back to the queue: long enough not to spin, short enough that the
// task is not held back.
const (
	minPublishBackoff = 200 * time.Millisecond
	maxPublishBackoff = time.Second
)

// process runs one delivery to its end: decoded, handled, its outcomes
// published and the delivery acked, or nacked back to the queue. A task
// batch message (protocol.Batch) is handled task by task, or in one call
// of a BatchHandlerFunc, and settled as a whole: one result batch for its
// completed tasks and a message of its own for each failed task (a retry
// or a dead letter), all confirmed before the one ack.
func (s *session) process(d *delivery) {
	attempt := retriesSoFar(d.Headers) + 1
	bodies, batch, err := protocol.DecodeTasks(d.Body)
	if err != nil {
		s.deadLetter(d, Task{Type: d.Type, Attempt: attempt}, protocol.ReasonMalformed, err, nil)
		return
	}
	budget := maxRetries(d.Headers)
	tasks := make([]Task, len(bodies))
	for i, b := range bodies {
		tasks[i] = Task{JobID: b.JobID, TaskID: b.TaskID, Type: d.Type, Attempt: attempt,
			MaxRetries: budget, Payload: b.Payload}
	}
	if s.w.cancelled.has(tasks[0].JobID) {
		s.skip(d, tasks)
		return
	}
	if batch && d.Redelivered {
		// Its worker crashed, lost its connection or shut down mid-batch:
		// one of the tasks may be what crashes workers. Alone, each task
		// meets the delivery limit on its own.
		s.split(d, tasks)
		return
	}
	h, ok := s.w.handler(d.Type)
	if !ok {
		err := unknownType(d.Type)
		outs := make([]outbound, len(tasks))
		evs := make([]Event, len(tasks))
		for i, t := range tasks {
			outs[i], evs[i] = s.deadLetterMsg(d, t, batch, protocol.ReasonUnknownType, err, nil)
		}
		s.publishThenAck(d, outs, evs, tasks[0])
		return
	}
	runs, ok := s.run(h, tasks)
	if !ok {
		// Shutdown stopped waiting for the handler: whatever it
		// returned, the tasks run again elsewhere.
		s.requeue(d, s.event(tasks[0]), s.taskLog(tasks[0]))
		return
	}
	s.settleRuns(d, batch, runs)
}

// taskRun is one task's run: what its handler returned, and when.
type taskRun struct {
	task              Task
	value             any
	err               error
	started, finished time.Time
}

// run runs the tasks through h, one after another for a HandlerFunc, in
// one call for a BatchHandlerFunc. ok is false when shutdown cancelled
// the handlers' context meanwhile.
func (s *session) run(h handlerSet, tasks []Task) ([]taskRun, bool) {
	runs := make([]taskRun, len(tasks))
	if h.batch != nil {
		started := time.Now().UTC()
		outcomes := s.callBatch(h.batch, tasks)
		finished := time.Now().UTC()
		for i, t := range tasks {
			runs[i] = taskRun{task: t, value: outcomes[i].Value, err: outcomes[i].Err, started: started, finished: finished}
		}
		return runs, s.handlers.Err() == nil
	}
	for i, t := range tasks {
		started := time.Now().UTC()
		value, err := s.call(h.one, t)
		runs[i] = taskRun{task: t, value: value, err: err, started: started, finished: time.Now().UTC()}
		if s.handlers.Err() != nil {
			return nil, false
		}
	}
	return runs, true
}

// settleRuns publishes the outcomes of a delivery's runs and then acks it:
// the completed tasks' results in one message (a result batch for a batch
// message), and a retry or a dead letter of its own for each failed task.
func (s *session) settleRuns(d *delivery, batch bool, runs []taskRun) {
	var (
		outs    []outbound
		evs     []Event
		results []protocol.Result
	)
	debug := s.log.Enabled(context.Background(), slog.LevelDebug)
	for _, r := range runs {
		t := r.task
		res := protocol.Result{
			JobID: t.JobID, TaskID: t.TaskID, Worker: s.w.cfg.Name, Attempt: t.Attempt,
			StartedAt: &r.started, FinishedAt: &r.finished,
		}
		dec := outcome.Of(r.value, r.err, IsPermanent, t.Attempt, t.MaxRetries, s.w.cfg.RetryTiers)
		if dec.Action == outcome.Complete {
			if debug {
				s.taskLog(t).Debug("worker: task completed", "duration", r.finished.Sub(r.started))
			}
			res.Status, res.Result = protocol.StatusCompleted, dec.Result
			results = append(results, res)
			ev := s.event(t)
			ev.Kind = EventCompleted
			evs = append(evs, ev)
			continue
		}
		out, ev := s.failure(d, t, batch, dec, res.StartedAt)
		outs = append(outs, out)
		evs = append(evs, ev)
	}
	if len(results) > 0 {
		msg, err := resultsMessage(results, batch)
		if err != nil {
			// Only a bug can get here: the results were built above.
			log := s.taskLog(runs[0].task)
			log.Error("worker: cannot encode results; the task goes back to the queue", "tasks", len(runs), "error", err)
			s.requeue(d, s.event(runs[0].task), log)
			return
		}
		outs = append(outs, outbound{s.w.names.ResultsExchange, protocol.RoutingKeyResult, msg})
	}
	s.publishThenAck(d, outs, evs, runs[0].task)
}

// call runs h, turning a panic into a transient error.
func (s *session) call(h HandlerFunc, t Task) (v any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("worker: handler panicked: %v", p)
			s.taskLog(t).Error("worker: handler panicked", "panic", fmt.Sprint(p), "stack", shortStack())
		}
	}()
	return h(s.handlers, t)
}

// callBatch runs h over tasks; a panic or an outcome count other than
// len(tasks) becomes a transient error for every task.
func (s *session) callBatch(h BatchHandlerFunc, tasks []Task) (outcomes []Outcome) {
	fail := func(err error) []Outcome {
		out := make([]Outcome, len(tasks))
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	defer func() {
		if p := recover(); p != nil {
			s.taskLog(tasks[0]).Error("worker: batch handler panicked", "tasks", len(tasks), "panic", fmt.Sprint(p), "stack", shortStack())
			outcomes = fail(fmt.Errorf("worker: batch handler panicked: %v", p))
		}
	}()
	outcomes = h(s.handlers, tasks)
	if len(outcomes) != len(tasks) {
		return fail(fmt.Errorf("worker: batch handler returned %d outcomes for %d tasks", len(outcomes), len(tasks)))
	}
	return outcomes
}

// failure returns the message that settles a task whose run failed, as
// the decision says: a retry through a delay tier or a dead letter.
func (s *session) failure(d *delivery, t Task, batch bool, dec outcome.Decision, started *time.Time) (outbound, Event) {
	if dec.Action == outcome.Retry {
		s.taskLog(t).Debug("worker: task failed; retrying", "error", dec.Err, "max_retries", t.MaxRetries, "delay", dec.Delay)
		return s.retryMsg(d, t, batch, dec.Delay, dec.Err)
	}
	// A permanent failure is dead-lettered like an exhausted one: the
	// aggregator marks the task failed from dead.q, and people find it in
	// tasks.dlq.
	return s.deadLetterMsg(d, t, batch, dec.Reason, dec.Err, started)
}

// resultsMessage returns the result message of a delivery's completed
// tasks: a plain result for a single task message, a result batch for a
// batch message.
func resultsMessage(results []protocol.Result, batch bool) (amqp.Publishing, error) {
	if !batch {
		return resultMessage(results[0])
	}
	return resultBatchMessage(results)
}

// outbound is one message a delivery's settlement publishes.
type outbound struct {
	exchange, key string
	msg           amqp.Publishing
}

// deadLetterMsg returns a copy of task t of d for the dead-letter exchange
// with the reason and cause in its headers (and when the failed run
// started, if it ran), and the event that reports it.
func (s *session) deadLetterMsg(d *delivery, t Task, batch bool, reason string, cause error, started *time.Time) (outbound, Event) {
	s.taskLog(t).Warn("worker: task dead-lettered", "reason", reason, "error", cause)
	msg := s.taskCopy(d, t, batch)
	// Like the broker's own dead-lettering, drop the expiration so that
	// the dead letter does not expire from the dead-letter queues.
	msg.Expiration = ""
	msg.Headers[protocol.HeaderError] = truncate(cause.Error(), maxHeaderError)
	msg.Headers[protocol.HeaderReason] = reason
	msg.Headers[protocol.HeaderWorker] = s.w.cfg.Name
	msg.Headers[protocol.HeaderFailedAt] = time.Now().UTC().Format(time.RFC3339Nano)
	if started != nil {
		msg.Headers[protocol.HeaderStartedAt] = started.UTC().Format(time.RFC3339Nano)
	} else {
		delete(msg.Headers, protocol.HeaderStartedAt)
	}
	msg.Headers[protocol.HeaderRetry] = int64(retriesSoFar(d.Headers))
	ev := s.event(t)
	ev.Kind, ev.Reason, ev.Err = EventDeadLettered, reason, cause
	return outbound{s.w.names.DeadLetterExchange, protocol.RoutingKeyTaskFailed, msg}, ev
}

// deadLetter dead-letters the whole delivery d (one task, or a message
// that is not a task at all), then acks it.
func (s *session) deadLetter(d *delivery, t Task, reason string, cause error, started *time.Time) {
	out, ev := s.deadLetterMsg(d, t, false, reason, cause, started)
	s.publishThenAck(d, []outbound{out}, []Event{ev}, t)
}

// split republishes each task of a redelivered batch message as a single
// task message, with the batch's headers, to where the batch came from,
// then acks the batch.
func (s *session) split(d *delivery, tasks []Task) {
	s.taskLog(tasks[0]).Info("worker: a redelivered task batch is split into single tasks", "tasks", len(tasks))
	outs := make([]outbound, len(tasks))
	evs := make([]Event, len(tasks))
	for i, t := range tasks {
		msg := s.taskCopy(d, t, true)
		// Each copy is a new message: the batch's delivery count is not
		// its (the broker counts the copy's own deliveries).
		delete(msg.Headers, "x-delivery-count")
		outs[i] = outbound{d.Exchange, d.RoutingKey, msg}
		evs[i] = s.event(t)
		evs[i].Kind = EventSplit
	}
	s.publishThenAck(d, outs, evs, tasks[0])
}

// skip acks a task message of a cancelled job without running it or
// publishing anything: the job is closed, and nothing about its tasks
// matters any more.
func (s *session) skip(d *delivery, tasks []Task) {
	log := s.taskLog(tasks[0])
	ran, err := d.settle(func() error { return d.Ack(false) })
	if !ran {
		return
	}
	if err != nil {
		// The task comes back when the channel closes, and is skipped again.
		log.Warn("worker: ack a task of a cancelled job", "error", err)
		return
	}
	log.Debug("worker: task skipped; its job is cancelled", "tasks", len(tasks))
	for _, t := range tasks {
		ev := s.event(t)
		ev.Kind = EventSkipped
		s.w.emit(ev)
	}
}

// publishThenAck publishes outs, waits for the broker to confirm every
// one, and only then acks d and reports evs: the outcomes are safe before
// the task leaves the queue. If a publish fails, d goes back to the queue
// after a short pause and runs again; the outcomes already published are
// duplicates the aggregator absorbs.
func (s *session) publishThenAck(d *delivery, outs []outbound, evs []Event, t Task) {
	ctx, cancel := context.WithTimeout(s.handlers, confirmTimeout)
	err := s.publishAll(ctx, outs)
	cancel()
	log := s.log // with the task's attributes only where something goes wrong
	if err != nil {
		log = s.taskLog(t)
	}
	if err != nil && s.lost.Load() {
		log.Debug("worker: outcome not confirmed; the connection was lost and the task will be redelivered", "error", err)
		return
	}
	if err != nil {
		n := s.publishFailures.Add(1)
		log.Warn("worker: outcome not confirmed by the broker; the task goes back to the queue", "error", err)
		s.pause(publishBackoff(n))
		ran, nerr := d.settle(func() error { return d.Nack(false, true) })
		if ran && nerr != nil {
			log.Warn("worker: nack; the broker requeues the task when the channel closes", "error", nerr)
		}
		if ran {
			for _, ev := range evs {
				s.w.emit(Event{Kind: EventPublishFailed, JobID: ev.JobID, TaskID: ev.TaskID, Type: ev.Type, Attempt: ev.Attempt, Err: err})
			}
		}
		return
	}
	s.publishFailures.Store(0)
	ran, aerr := d.settle(func() error { return d.Ack(false) })
	if !ran {
		return
	}
	if aerr != nil {
		// The outcome is published; the task will be redelivered and its
		// duplicate outcome is a no-op downstream.
		s.taskLog(t).Warn("worker: ack after a confirmed publish", "error", aerr)
		return
	}
	for _, ev := range evs {
		s.w.emit(ev)
	}
}

// publishAll publishes outs within the publisher's confirm window and
// waits for all their confirms; it returns the first error.
func (s *session) publishAll(ctx context.Context, outs []outbound) error {
	if len(outs) == 1 {
		return s.pub.PublishAndWait(ctx, outs[0].exchange, outs[0].key, outs[0].msg)
	}
	confs := make([]*broker.Confirmation, 0, len(outs))
	var firstErr error
	for _, o := range outs {
		c, err := s.pub.Publish(ctx, o.exchange, o.key, o.msg)
		if err != nil {
			firstErr = fmt.Errorf("publish to %q/%q: %w", o.exchange, o.key, err)
			break
		}
		confs = append(confs, c)
	}
	for _, c := range confs {
		if err := c.Wait(ctx); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// publishBackoff is the pause after the nth publish failure in a row.
func publishBackoff(n int64) time.Duration {
	d := minPublishBackoff
	for i := int64(1); i < n && d < maxPublishBackoff; i++ {
		d *= 2
	}
	return min(d, maxPublishBackoff)
}

// pause waits d, cut short by shutdown.
func (s *session) pause(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.stop.Done():
	case <-s.handlers.Done():
	}
}

func (s *session) taskLog(t Task) *slog.Logger {
	return s.log.With("job_id", t.JobID, "task_id", t.TaskID, "type", t.Type, "attempt", t.Attempt)
}

func (s *session) event(t Task) Event {
	return Event{JobID: t.JobID, TaskID: t.TaskID, Type: t.Type, Attempt: t.Attempt}
}

func unknownType(taskType string) error {
	if taskType == "" {
		return fmt.Errorf("worker: the task message has no type property, and handlers are chosen by type")
	}
	return fmt.Errorf("worker: no handler for task type %q on this queue", taskType)
}

// shortStack formats the panicking goroutine's innermost frames, without
// the runtime's and this package's recovery frames.
func shortStack() string {
	var pcs [32]uintptr
	n := runtime.Callers(3, pcs[:])
	frames := runtime.CallersFrames(pcs[:n])
	var b strings.Builder
	kept := 0
	for kept < 8 {
		f, more := frames.Next()
		if !strings.HasPrefix(f.Function, "runtime.") {
			fmt.Fprintf(&b, "%s\n\t%s:%d\n", f.Function, f.File, f.Line)
			kept++
		}
		if !more {
			break
		}
	}
	return b.String()
}
