package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/warrenhq/warren/internal/backoff"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/outcome"
	"github.com/warrenhq/warren/internal/spans"
	"github.com/warrenhq/warren/internal/wire"
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

// process runs one delivery to its end: handled, its outcomes published
// and the delivery acked, or nacked back to the queue. A task batch
// message is handled task by task, or in one call of a BatchHandlerFunc,
// and settled as a whole: one result batch for its completed tasks and a
// message of its own for each failed task (a retry or a dead letter), all
// confirmed before the one ack.
func (s *session) process(d *delivery) {
	d.span = s.startProcess(d)
	defer d.span.End()
	switch {
	case errors.Is(d.msg.Malformed, wire.ErrTooLarge):
		s.deadLetterAll(d, protocol.ReasonTooLarge, d.msg.Malformed)
		return
	case d.msg.Malformed != nil:
		s.deadLetterAll(d, protocol.ReasonMalformed, d.msg.Malformed)
		return
	case s.w.cancelled.has(d.tasks[0].JobID):
		d.span.AddEvent("skipped: the job is cancelled")
		s.skip(d)
		return
	case s.w.paused.holds(d.tasks[0].JobID, d.msg.Queue):
		s.hold(d)
		return
	case d.msg.Reduce:
		s.reduce(d)
		return
	case d.msg.Batch && d.msg.Redelivered:
		// Its worker crashed, lost its connection or shut down mid-batch:
		// one of the tasks may be what crashes workers. Alone, each task
		// meets the delivery limit on its own.
		d.span.AddEvent("split into single tasks")
		s.split(d)
		return
	}
	h, ok := s.w.handler(d.msg.Type)
	if !ok {
		s.unserved(d, outcome.UnknownType(d.msg.Type))
		return
	}
	runs, ok := s.run(s.handlerContext(d), h, d.tasks)
	if !ok {
		// Shutdown stopped waiting for the handler: whatever it
		// returned, the tasks run again elsewhere.
		s.requeue(d)
		return
	}
	s.settleRuns(d, runs)
}

// skip acks a task message of a cancelled job without running it or
// publishing anything: the job is closed, and nothing about its tasks
// matters any more.
func (s *session) skip(d *delivery) {
	log := s.taskLog(d.tasks[0])
	ran, err := d.ack()
	if !ran {
		return
	}
	if err != nil {
		// The task comes back when the channel closes, and is skipped again.
		log.Warn("worker: ack a task of a cancelled job", "error", err)
		return
	}
	log.Debug("worker: task skipped; its job is cancelled", "tasks", len(d.tasks))
	for _, t := range d.tasks {
		ev := s.event(t)
		ev.Kind = EventSkipped
		s.w.emit(ev)
	}
}

// split republishes each task of a redelivered batch message as a single
// task message to where the batch came from, then acks the batch.
func (s *session) split(d *delivery) {
	s.taskLog(d.tasks[0]).Info("worker: a redelivered task batch is split into single tasks", "tasks", len(d.tasks))
	outs := make([]wire.Outbound, len(d.tasks))
	evs := make([]Event, len(d.tasks))
	for i, t := range d.tasks {
		outs[i] = d.msg.Split(t.message())
		evs[i] = s.event(t)
		evs[i].Kind = EventSplit
	}
	s.publishThenAck(d, outs, evs)
}

// deadLetterAll dead-letters every task of d, without running it, then
// acks d; a message that is not a task is dead-lettered whole.
func (s *session) deadLetterAll(d *delivery, reason string, cause error) {
	outs := make([]wire.Outbound, len(d.tasks))
	evs := make([]Event, len(d.tasks))
	for i, t := range d.tasks {
		outs[i], evs[i] = s.deadLetter(d, t, reason, cause, time.Time{})
	}
	spans.Fail(d.span, cause)
	traceCopies(d, outs)
	s.publishThenAck(d, outs, evs)
}

// settleRuns publishes the outcomes of a delivery's runs and then acks it:
// the completed tasks' results in one message (a result batch for a batch
// message; the result of a single task message goes through the result
// publisher, publishResult, and may share a result batch with others),
// and a retry or a dead letter of its own for each failed task, as
// outcome.Of decides (a run past its task timeout is a failure).
func (s *session) settleRuns(d *delivery, runs []taskRun) {
	var (
		outs    []wire.Outbound
		evs     []Event
		results []protocol.Result
		// split says a spawn went in parts: its messages are in outs.
		split bool
	)
	debug := s.log.Enabled(context.Background(), slog.LevelDebug)
	for _, r := range runs {
		t := r.task
		dec := outcome.Of(outcome.Run{Value: r.value, Err: r.err, Timeout: t.Timeout, Elapsed: r.elapsed, MaxResult: s.w.cfg.MaxResultBytes},
			IsPermanent, t.Attempt, t.MaxRetries, s.w.cfg.RetryTiers)
		var out wire.Outbound
		ev := s.event(t)
		ev.Duration = r.elapsed
		dec = outcome.WithSpawn(dec, t.spawn, s.w.cfg.MaxMessageBytes-protocol.EnvelopeBytes)
		switch dec.Action {
		case outcome.Complete:
			if debug {
				s.taskLog(t).Debug("worker: task completed", "duration", r.finished.Sub(r.started))
			}
			res := protocol.Result{
				JobID: t.JobID, TaskID: t.TaskID, Worker: s.w.cfg.Name, Attempt: t.Attempt,
				StartedAt: &r.started, FinishedAt: &r.finished,
				Status: protocol.StatusCompleted, Result: dec.Result, Spawn: dec.Spawn,
			}
			if len(dec.SpawnParts) > 0 {
				// Each part but the last goes in a message of its own,
				// confirmed with the rest before the ack; the last goes
				// with the result.
				var (
					parts []wire.Outbound
					err   error
				)
				if res, parts, err = s.spawnParts(d, res, dec.SpawnParts); err != nil {
					// Only a bug can get here: the parts were built above.
					s.taskLog(t).Error("worker: cannot encode a spawn part; the task goes back to the queue", "error", err)
					s.requeue(d)
					return
				}
				outs = append(outs, parts...)
				split = true
			}
			results = append(results, res)
			ev.Kind = EventCompleted
			evs = append(evs, ev)
			continue
		case outcome.Retry:
			s.taskLog(t).Debug("worker: task failed; retrying", "error", dec.Err, "max_retries", t.MaxRetries, "delay", dec.Delay)
			out = d.msg.Retry(s.w.names, t.message(), dec.Delay)
			// The server keeps the failed run as an attempt of the task;
			// confirmed with the retry, before the ack.
			att, err := d.msg.RetriedAttempt(s.w.names, protocol.Result{
				JobID: t.JobID, TaskID: t.TaskID, Worker: s.w.cfg.Name, Attempt: t.Attempt,
				StartedAt: &r.started, FinishedAt: &r.finished, Error: dec.Err.Error(), Traceback: tracebackOf(dec.Err),
			})
			if err == nil {
				outs = append(outs, att)
			} else {
				// Only a bug can get here; the retry itself goes on.
				s.taskLog(t).Error("worker: cannot encode a retried attempt; it goes unrecorded", "error", err)
			}
			ev.Kind, ev.Err, ev.Delay = EventRetried, dec.Err, dec.Delay
		default:
			// A permanent failure is dead-lettered like an exhausted one:
			// the aggregator marks the task failed from dead.q, and people
			// find it in tasks.dlq.
			out, ev = s.deadLetter(d, t, dec.Reason, dec.Err, r.started)
			ev.Duration = r.elapsed
		}
		spans.Fail(d.span, ev.Err)
		outs = append(outs, out)
		evs = append(evs, ev)
	}
	traceCopies(d, outs)
	if len(results) > 0 && !d.msg.Batch && !d.msg.Reduce && !split {
		// A single task message that completed: its result may share a
		// result batch with others that finish at the same time. A
		// reduce task's result (task 0) never does: a result batch holds
		// map tasks only.
		s.publishResult(d, results[0], evs)
		return
	}
	if len(results) > 0 {
		rs, err := d.msg.ResultsWithin(s.w.names, results, s.w.cfg.MaxMessageBytes)
		if err != nil {
			// Only a bug can get here: the results were built above.
			s.taskLog(runs[0].task).Error("worker: cannot encode results; the task goes back to the queue", "tasks", len(runs), "error", err)
			s.requeue(d)
			return
		}
		// The result message's span covers the publishing of the
		// delivery's retries and dead letters too: they are confirmed
		// together.
		span := s.startResults([]*delivery{d}, rs)
		endSpan(span, s.publishThenAck(d, append(outs, rs...), evs))
		return
	}
	s.publishThenAck(d, outs, evs)
}

// deadLetter returns the dead letter of task t of d, which failed for
// reason with cause (in a run that started at started, unless that is
// zero), and the event that reports it.
func (s *session) deadLetter(d *delivery, t Task, reason string, cause error, started time.Time) (wire.Outbound, Event) {
	s.taskLog(t).Warn("worker: task dead-lettered", "reason", reason, "error", cause)
	out := d.msg.DeadLetter(s.w.names, t.message(), wire.Failure{
		Reason: reason, Error: cause.Error(), Worker: s.w.cfg.Name, StartedAt: started, FailedAt: time.Now(),
		Traceback: tracebackOf(cause),
	})
	ev := s.event(t)
	ev.Kind, ev.Reason, ev.Err = EventDeadLettered, reason, cause
	return out, ev
}

// publishThenAck publishes outs, waits for the broker to confirm every
// one, and only then acks d and reports evs: the outcomes are safe before
// the task leaves the queue. If a publish fails, d goes back to the queue
// after a short pause and runs again; the outcomes already published are
// duplicates the aggregator absorbs.
func (s *session) publishThenAck(d *delivery, outs []wire.Outbound, evs []Event) error {
	ctx, cancel := context.WithTimeout(s.handlers, confirmTimeout)
	err := s.publishAll(ctx, outs)
	cancel()
	if err != nil {
		s.publishFailed(d, evs, err)
		return err
	}
	s.publishFailures.Store(0)
	ran, aerr := d.ack()
	s.acked(d, ran, aerr, evs)
	return nil
}

// acked reports evs once d, whose outcomes are confirmed, is acked; ran
// and err are the ack's.
func (s *session) acked(d *delivery, ran bool, aerr error, evs []Event) {
	if !ran {
		return
	}
	if aerr != nil {
		// The outcome is published; the task will be redelivered and its
		// duplicate outcome is a no-op downstream.
		s.taskLog(d.tasks[0]).Warn("worker: ack after a confirmed publish", "error", aerr)
		return
	}
	if s.log.Enabled(context.Background(), slog.LevelDebug) {
		s.log.Debug("worker: delivery acked; its outcomes are confirmed", d.logAttrs()...)
	}
	for _, ev := range evs {
		s.w.emit(ev)
	}
}

// publishFailed settles d, whose outcomes were not all confirmed: back to
// the queue after a pause that grows with the failures in a row, unless
// the connection is lost (the broker then redelivers d by itself).
func (s *session) publishFailed(d *delivery, evs []Event, err error) {
	spans.Fail(d.span, err)
	log := s.taskLog(d.tasks[0])
	if s.lost.Load() {
		log.Debug("worker: outcome not confirmed; the connection was lost and the task will be redelivered", "error", err)
		return
	}
	n := s.publishFailures.Add(1)
	log.Warn("worker: outcome not confirmed by the broker; the task goes back to the queue", "error", err)
	s.pause(publishBackoff(n))
	ran, nerr := d.nack()
	if ran && nerr != nil {
		log.Warn("worker: nack; the broker requeues the task when the channel closes", "error", nerr)
	}
	if ran {
		for _, ev := range evs {
			s.w.emit(Event{Kind: EventPublishFailed, JobID: ev.JobID, TaskID: ev.TaskID, Type: ev.Type, Attempt: ev.Attempt, Err: err})
		}
	}
}

// publishAll publishes outs within the publisher's confirm window and
// waits for all their confirms; it returns the first error. An optional
// message (wire.Outbound.Optional) the broker returns unrouted is no
// error: no server records attempts yet.
func (s *session) publishAll(ctx context.Context, outs []wire.Outbound) error {
	if len(outs) == 1 {
		return unroutedOK(outs[0], s.pub.PublishAndWait(ctx, outs[0].Exchange, outs[0].Key, outs[0].Msg))
	}
	confs := make([]*broker.Confirmation, 0, len(outs))
	var firstErr error
	for _, o := range outs {
		c, err := s.pub.Publish(ctx, o.Exchange, o.Key, o.Msg)
		if err != nil {
			firstErr = fmt.Errorf("publish to %q/%q: %w", o.Exchange, o.Key, err)
			break
		}
		confs = append(confs, c)
	}
	for i, c := range confs {
		if err := unroutedOK(outs[i], c.Wait(ctx)); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// unroutedOK is err, the publish of o's, unless o is optional and err
// says only that the broker routed it nowhere.
func unroutedOK(o wire.Outbound, err error) error {
	if o.Optional && errors.Is(err, broker.ErrUnroutable) {
		return nil
	}
	return err
}

// publishBackoff is the pause after the nth publish failure in a row.
func publishBackoff(n int64) time.Duration {
	return backoff.Policy{Min: minPublishBackoff, Max: maxPublishBackoff}.Delay(int(min(n, 64)))
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

// spawnParts returns result r of a task of d as the last of parts, its
// spawn's parts (outcome.Decision.SpawnParts), and the single result
// messages of the other parts, each with a null result: the store
// records r, with every part's tasks in part order, once it has them
// all, whatever order they arrive in (protocol.Result.SpawnParts).
func (s *session) spawnParts(d *delivery, r protocol.Result, parts [][]json.RawMessage) (protocol.Result, []wire.Outbound, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	run := hex.EncodeToString(b[:])
	single := d.msg
	single.Batch = false
	var outs []wire.Outbound
	for i, part := range parts[:len(parts)-1] {
		p := protocol.Result{JobID: r.JobID, TaskID: r.TaskID, Worker: r.Worker, Attempt: r.Attempt, Status: protocol.StatusCompleted,
			Result: json.RawMessage("null"), Spawn: part, SpawnRun: run, SpawnPart: i + 1, SpawnParts: len(parts)}
		out, err := single.Results(s.w.names, []protocol.Result{p})
		if err != nil {
			return r, nil, err
		}
		outs = append(outs, out)
	}
	r.Spawn, r.SpawnRun, r.SpawnPart, r.SpawnParts = parts[len(parts)-1], run, len(parts), len(parts)
	return r, outs, nil
}
