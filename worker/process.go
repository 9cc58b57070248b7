package worker

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

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

// process runs one delivery to its end: decoded, handled, its outcome
// published and the delivery acked, or nacked back to the queue.
func (s *session) process(d *delivery) {
	body, err := protocol.DecodeTask(d.Body)
	if err != nil {
		s.deadLetter(d, Task{Type: d.Type, Attempt: retriesSoFar(d.Headers) + 1}, protocol.ReasonMalformed, err, nil)
		return
	}
	t := Task{
		JobID:      body.JobID,
		TaskID:     body.TaskID,
		Type:       d.Type,
		Attempt:    retriesSoFar(d.Headers) + 1,
		MaxRetries: maxRetries(d.Headers),
		Payload:    body.Payload,
	}
	if s.w.cancelled.has(t.JobID) {
		s.skip(d, t)
		return
	}
	h := s.w.handler(d.Type)
	if h == nil {
		s.deadLetter(d, t, protocol.ReasonUnknownType, unknownType(d.Type), nil)
		return
	}
	log := s.taskLog(t)
	started := time.Now().UTC()
	value, herr := s.call(h, t, log)
	finished := time.Now().UTC()
	if s.handlers.Err() != nil {
		// Shutdown stopped waiting for this handler: whatever it
		// returned, the task runs again elsewhere.
		s.requeue(d, s.event(t), log)
		return
	}
	res := protocol.Result{
		JobID: t.JobID, TaskID: t.TaskID, Worker: s.w.cfg.Name, Attempt: t.Attempt,
		StartedAt: &started, FinishedAt: &finished,
	}
	if herr == nil {
		msg, err := s.completedResult(res, value)
		if err == nil {
			log.Debug("worker: task completed", "duration", finished.Sub(started))
			ev := s.event(t)
			ev.Kind = EventCompleted
			s.publishThenAck(d, s.w.names.ResultsExchange, protocol.RoutingKeyResult, msg, ev, log)
			return
		}
		herr = Permanent(err)
	}
	s.fail(d, t, res, herr, log)
}

// call runs h, turning a panic into a transient error.
func (s *session) call(h HandlerFunc, t Task, log *slog.Logger) (v any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("worker: handler panicked: %v", p)
			log.Error("worker: handler panicked", "panic", fmt.Sprint(p), "stack", shortStack())
		}
	}()
	return h(s.handlers, t)
}

// fail settles a task whose run failed, as decideFailure says.
func (s *session) fail(d *delivery, t Task, res protocol.Result, herr error, log *slog.Logger) {
	action, delay := decideFailure(herr, t.Attempt, t.MaxRetries, s.w.cfg.RetryTiers)
	switch action {
	case failTask:
		// A permanent failure is dead-lettered like an exhausted one: the
		// aggregator marks the task failed from dead.q, and people find it
		// in tasks.dlq.
		s.deadLetter(d, t, protocol.ReasonPermanent, herr, res.StartedAt)
	case retryTask:
		log.Debug("worker: task failed; retrying", "error", herr, "max_retries", t.MaxRetries, "delay", delay)
		s.retry(d, t, delay, herr, log)
	default:
		s.deadLetter(d, t, protocol.ReasonRetriesExhausted, herr, res.StartedAt)
	}
}

// completedResult returns the result message of a handler's value, or an
// error if the value cannot be its result.
func (s *session) completedResult(res protocol.Result, value any) (amqp.Publishing, error) {
	raw, err := marshalResult(value)
	if err != nil {
		return amqp.Publishing{}, err
	}
	res.Status = protocol.StatusCompleted
	res.Result = raw
	return resultMessage(res)
}

// deadLetter publishes a copy of the task to the dead-letter exchange
// with the reason and cause in its headers (and when the failed run
// started, if it ran), then acks the task.
func (s *session) deadLetter(d *delivery, t Task, reason string, cause error, started *time.Time) {
	log := s.taskLog(t)
	log.Warn("worker: task dead-lettered", "reason", reason, "error", cause)
	msg := s.copyOf(d, t)
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
	s.publishThenAck(d, s.w.names.DeadLetterExchange, protocol.RoutingKeyTaskFailed, msg, ev, log)
}

// skip acks a task of a cancelled job without running it or publishing
// anything: the job is closed, and nothing about the task matters any
// more.
func (s *session) skip(d *delivery, t Task) {
	log := s.taskLog(t)
	ran, err := d.settle(func() error { return d.Ack(false) })
	if !ran {
		return
	}
	if err != nil {
		// The task comes back when the channel closes, and is skipped again.
		log.Warn("worker: ack a task of a cancelled job", "error", err)
		return
	}
	log.Debug("worker: task skipped; its job is cancelled")
	ev := s.event(t)
	ev.Kind = EventSkipped
	s.w.emit(ev)
}

// publishThenAck publishes msg, waits for the broker's confirm, and only
// then acks d and reports ev: the outcome is safe before the task leaves
// the queue. If the publish fails, d goes back to the queue after a short
// pause and runs again.
func (s *session) publishThenAck(d *delivery, exchange, key string, msg amqp.Publishing, ev Event, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(s.handlers, confirmTimeout)
	err := s.pub.PublishAndWait(ctx, exchange, key, msg)
	cancel()
	if err != nil && s.lost.Load() {
		log.Debug("worker: outcome not confirmed; the connection was lost and the task will be redelivered", "error", err)
		return
	}
	if err != nil {
		n := s.publishFailures.Add(1)
		log.Warn("worker: outcome not confirmed by the broker; the task goes back to the queue",
			"exchange", exchange, "routing_key", key, "error", err)
		s.pause(publishBackoff(n))
		ran, nerr := d.settle(func() error { return d.Nack(false, true) })
		if ran && nerr != nil {
			log.Warn("worker: nack; the broker requeues the task when the channel closes", "error", nerr)
		}
		if ran {
			s.w.emit(Event{Kind: EventPublishFailed, JobID: ev.JobID, TaskID: ev.TaskID, Type: ev.Type, Attempt: ev.Attempt, Err: err})
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
		log.Warn("worker: ack after a confirmed publish", "error", aerr)
		return
	}
	s.w.emit(ev)
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
