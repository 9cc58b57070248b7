package worker

import (
	"sync"
	"time"

	"github.com/warrenhq/warren/internal/wire"
	"github.com/warrenhq/warren/protocol"
)

// maxHeldTier bounds the retry tier a task of a paused job or queue
// waits in: the nth hold waits the nth tier, none past the second (5 s
// with the default tiers), so that a resumed job's tasks that were in
// the broker run again within seconds, while a long pause costs each
// held message one publish every few seconds, not a spin.
const maxHeldTier = 2

// maxPauses bounds the pauses a worker remembers: past it, a new pause
// is not held (its tasks run as if it had not been heard), and the
// server's relay, which publishes nothing of a paused job, still holds
// the rest of its tasks.
const maxPauses = 100_000

// pauseKey names what a pause is about: a job (queue "") or a work
// queue (job "").
type pauseKey struct{ job, queue string }

// pauseSet holds the pauses a worker heard (protocol.ControlPause), each
// until protocol.PauseLease after the last message of it, or until its
// protocol.ControlResume. It is safe for concurrent use.
type pauseSet struct {
	lease time.Duration
	now   func() time.Time

	mu    sync.Mutex
	until map[pauseKey]time.Time
}

func newPauseSet(lease time.Duration, now func() time.Time) *pauseSet {
	return &pauseSet{lease: lease, now: now, until: make(map[pauseKey]time.Time)}
}

// pause holds k for the lease from now; expired pauses are dropped when
// the set is full.
func (p *pauseSet) pause(k pauseKey) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if _, ok := p.until[k]; !ok && len(p.until) >= maxPauses {
		for key, until := range p.until {
			if !now.Before(until) {
				delete(p.until, key)
			}
		}
		if len(p.until) >= maxPauses {
			return
		}
	}
	p.until[k] = now.Add(p.lease)
}

// resume ends the pause of k.
func (p *pauseSet) resume(k pauseKey) {
	p.mu.Lock()
	delete(p.until, k)
	p.mu.Unlock()
}

// holds reports whether a task of job jobID from work queue queue is to
// be held: its job or its queue is paused.
func (p *pauseSet) holds(jobID, queue string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.until) == 0 {
		return false
	}
	now := p.now()
	for _, k := range [2]pauseKey{{job: jobID}, {queue: queue}} {
		if until, ok := p.until[k]; ok {
			if now.Before(until) {
				return true
			}
			delete(p.until, k)
		}
	}
	return false
}

// controlPause applies a ControlPause or ControlResume to the worker's
// pauses.
func (w *Worker) controlPause(c protocol.Control) {
	k := pauseKey{job: c.JobID, queue: c.Queue}
	if c.Type == protocol.ControlResume {
		w.paused.resume(k)
		w.log.Debug("worker: resume heard; its tasks run again", "job_id", c.JobID, "queue", c.Queue)
		w.emit(Event{Kind: EventResumeSeen, JobID: c.JobID, Queue: c.Queue})
		return
	}
	w.paused.pause(k)
	w.log.Debug("worker: pause heard; its tasks are held", "job_id", c.JobID, "queue", c.Queue)
	w.emit(Event{Kind: EventPauseSeen, JobID: c.JobID, Queue: c.Queue})
}

// hold puts back the tasks of d, whose job or work queue is paused,
// without running them: a copy of each through a retry tier (the nth
// hold the nth tier, none past maxHeldTier), confirmed before d is
// acked, as for a task no handler here serves (unserved), with x-retry
// unchanged, so that no attempt is spent and no limit counts the hold
// (docs/protocol.md, "What a worker does with a task", step 2).
func (s *session) hold(d *delivery) {
	tiers := s.w.cfg.RetryTiers
	delay := tiers[protocol.RetryTier(d.msg.Holds+1, min(len(tiers), maxHeldTier))]
	s.taskLog(d.tasks[0]).Debug("worker: the task's job or queue is paused; it goes back until the resume",
		"holds", d.msg.Holds+1, "delay", delay, "queue", d.msg.Queue)
	d.span.AddEvent("held: the job or its queue is paused")
	outs := make([]wire.Outbound, len(d.tasks))
	evs := make([]Event, len(d.tasks))
	for i, t := range d.tasks {
		outs[i] = d.msg.Held(s.w.names, t.message(), delay)
		evs[i] = s.event(t)
		evs[i].Kind, evs[i].Delay, evs[i].Queue = EventHeld, delay, d.msg.Queue
	}
	traceCopies(d, outs)
	s.publishThenAck(d, outs, evs)
}
