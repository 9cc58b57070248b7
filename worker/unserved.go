package worker

import (
	"fmt"
	"time"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/wire"
	"github.com/warrenhq/warren/protocol"
)

// maxUnservedTier bounds the retry tier a task without a handler waits
// in: the nth bounce waits the nth tier, none past the third (30 s with
// the default tiers), so that a worker that serves the type, started
// later, gets the task within seconds, not the last tier's ten minutes.
const maxUnservedTier = 3

// unserved settles d, whose type this worker has no handler (or, for a
// reduce task, no reducer) for: each task goes back through a retry tier
// for a worker that serves it (docs/protocol.md, "What a worker does with
// a task", step 3), confirmed before d is acked, never requeued on the
// spot (which would spin, and count against the queue's delivery limit).
// The wait grows with the bounces. Once the tasks have gone unserved for
// longer than their task timeout (the job's task_timeout, an hour when
// the message does not say), they are dead-lettered with
// protocol.ReasonUnknownType, which fails them: the clear end. cause is
// the error for this worker's log (outcome.UnknownType or
// outcome.UnknownReducer).
func (s *session) unserved(d *delivery, cause error) {
	if d.msg.Type == "" {
		// No worker can serve a message without a type: fail it now.
		s.deadLetterAll(d, protocol.ReasonUnknownType, cause)
		return
	}
	now := time.Now()
	limit := d.msg.Timeout
	if limit <= 0 {
		limit = warren.DefaultTaskTimeout
	}
	first := d.msg.FirstUnservedAt
	if first.IsZero() || first.After(now) {
		// A clock ahead of ours must not postpone the end: count from now.
		first = now
	}
	waited := now.Sub(first)
	if d.msg.Bounces > 0 && waited >= limit {
		s.deadLetterAll(d, protocol.ReasonUnknownType, unservedError(d.msg.Type, d.msg.Queue, d.msg.Reduce, limit))
		return
	}
	delay := unservedDelay(s.w.cfg.RetryTiers, d.msg.Bounces+1, limit-waited)
	s.taskLog(d.tasks[0]).Info("worker: no handler for the task's type; it goes back for a worker that serves it",
		"error", cause, "bounces", d.msg.Bounces+1, "delay", delay, "unserved_for", waited, "limit", limit)
	d.span.AddEvent("unserved: put back for a worker that serves the type")
	outs := make([]wire.Outbound, len(d.tasks))
	evs := make([]Event, len(d.tasks))
	for i, t := range d.tasks {
		outs[i] = d.msg.Unserved(s.w.names, t.message(), delay, now)
		evs[i] = s.event(t)
		evs[i].Kind, evs[i].Delay, evs[i].Err = EventUnserved, delay, cause
	}
	traceCopies(d, outs)
	s.publishThenAck(d, outs, evs)
}

// unservedDelay is the wait of a task's nth bounce for want of a
// handler: the nth retry tier, none past maxUnservedTier, and the longest
// one within left (the time before its clear end) when that one is
// longer, so that the end comes about when it is due; the first tier at
// least.
func unservedDelay(tiers []time.Duration, n int, left time.Duration) time.Duration {
	i := protocol.RetryTier(n, min(len(tiers), maxUnservedTier))
	for i > 0 && tiers[i] > left {
		i--
	}
	return tiers[i]
}

// unservedError is the failure of tasks of taskType (reduce tasks when
// reduce) that went unserved on queue for limit.
func unservedError(taskType, queue string, reduce bool, limit time.Duration) error {
	what := "serves type"
	if reduce {
		what = "has a reducer for type"
	}
	return fmt.Errorf("no live worker %s %q on queue %q (for %s)", what, taskType, queue, limit)
}
