package api

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/warrenhq/warren"
)

// WaitingNoWorkerForType is Waiting.Reason for a job whose work queue has
// live workers, none of which advertises the job's task type in its
// heartbeats: its tasks go back and forth between those workers
// (docs/protocol.md, "What a worker does with a task") until a worker
// that serves the type comes, or they fail unknown_type after the job's
// task_timeout.
const WaitingNoWorkerForType = "no_worker_for_type"

// maxUnservedSince bounds the (queue, type) pairs whose first unserved
// reading the API remembers: past it, a new pair's "since" is the reading
// itself.
const maxUnservedSince = 1024

// unservedSince remembers, per queue and type, the first reading of the
// workers that found none serving the type, for Waiting.Since.
type unservedSince struct {
	mu    sync.Mutex
	first map[[2]string]time.Time
}

// since returns the first unserved reading of typ on queue, now if this
// is it; forget drops it once a worker serves the type.
func (u *unservedSince) since(queue, typ string, now time.Time) time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	k := [2]string{queue, typ}
	if t, ok := u.first[k]; ok {
		return t
	}
	if u.first == nil {
		u.first = make(map[[2]string]time.Time)
	}
	if len(u.first) < maxUnservedSince {
		u.first[k] = now
	}
	return now
}

func (u *unservedSince) forget(queue, typ string) {
	u.mu.Lock()
	delete(u.first, [2]string{queue, typ})
	u.mu.Unlock()
}

// unserved reports whether the heartbeats show live workers on queue and
// none of them serving typ. With no live worker on the queue at all it is
// false: that is the no_consumer case, or the workers send no heartbeats,
// and the heartbeats then say nothing about types.
func (s *server) unserved(queue, typ string) bool {
	if s.cfg.Workers == nil || typ == "" {
		return false
	}
	onQueue := false
	for _, w := range s.cfg.Workers() {
		if !w.Alive || !slices.Contains(w.Queues, queue) {
			continue
		}
		if slices.Contains(w.Types, typ) {
			s.unservedAt.forget(queue, typ)
			return false
		}
		onQueue = true
	}
	return onQueue
}

// unservedWaiting is the waiting of open job (whose own waiting found
// nothing) when no live worker serves the type its pending tasks need:
// its map tasks' type on its queue while some are pending, else its
// reduce task's on the reduce queue.
func (s *server) unservedWaiting(job jobDetailJSON) *waitingJSON {
	queue, typ := job.Queue, job.Type
	if job.PendingTasks == 0 {
		r, ok := job.Reduce.(reduceTaskJSON)
		if !ok {
			return nil
		}
		queue, typ = r.Queue, r.Task
	}
	if !s.unserved(queue, typ) {
		return nil
	}
	since := s.unservedAt.since(queue, typ, time.Now())
	return &waitingJSON{Reason: WaitingNoWorkerForType, Queue: queue, Type: typ, Since: since.UTC()}
}

// submitWarnings are the warnings of a submit answer for job: one for its
// task type, and one for its reduce task's, that no live worker serves on
// the queue it goes to.
func (s *server) submitWarnings(job warren.Job) []string {
	var out []string
	p := job.Policy
	warn := func(what, typ, queue string) {
		if s.unserved(queue, typ) {
			out = append(out, fmt.Sprintf("no live worker serves %s %q on queue %q: its tasks wait for one, and fail unknown_type after the task_timeout (%s)",
				what, typ, queue, p.EffectiveTaskTimeout()))
		}
	}
	warn("type", job.Type, p.EffectiveQueue())
	if p.ReduceTask != nil {
		warn("reduce task type", p.ReduceTask.Type, p.ReduceQueue())
	}
	return out
}
