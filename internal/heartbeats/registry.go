// Package heartbeats keeps a server's list of the workers it hears from:
// every worker publishes a heartbeat (protocol.Heartbeat) to the
// heartbeat exchange every few seconds, and every server binds a queue of
// its own to it (Consumer), so that every server sees every worker. The
// list lives in memory only: a server that starts knows the workers after
// their next heartbeat.
package heartbeats

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/warrenhq/warren/protocol"
)

// AliveIntervals is how many of its heartbeat intervals a worker may stay
// silent and still count as alive.
const AliveIntervals = 3

// DropAfter is how long a silent worker stays in the list, shown as not
// alive, before it is dropped.
const DropAfter = 5 * time.Minute

// maxWorkers bounds the list: heartbeats from more workers than that (a
// flood of made-up ids) are ignored until some are dropped.
const maxWorkers = 10000

// Worker is one worker as the registry knows it.
type Worker struct {
	// ID, Name, Queues, Types, Concurrency, InFlight, StartedAt and
	// Version are those of its last heartbeat.
	ID          string
	Name        string
	Queues      []string
	Types       []string
	Concurrency int
	InFlight    int
	StartedAt   time.Time
	Version     string
	// LastSeen is when its last heartbeat arrived, on this server's clock.
	LastSeen time.Time
	// Alive says it was seen within AliveIntervals of its heartbeat
	// interval.
	Alive bool

	interval time.Duration
}

// Registry is the list of workers heard from. It is safe for concurrent
// use.
type Registry struct {
	now func() time.Time

	mu      sync.Mutex
	workers map[string]Worker
}

// NewRegistry returns an empty registry reading the time from now (nil
// means time.Now).
func NewRegistry(now func() time.Time) *Registry {
	if now == nil {
		now = time.Now
	}
	return &Registry{now: now, workers: make(map[string]Worker)}
}

// Apply records heartbeat h, received now: a worker that said goodbye
// (protocol.HeartbeatStopping) is dropped at once. It reports whether h
// was recorded (false when the list is full of others).
func (r *Registry) Apply(h protocol.Heartbeat) bool {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if h.State == protocol.HeartbeatStopping {
		delete(r.workers, h.ID)
		return true
	}
	if _, known := r.workers[h.ID]; !known && len(r.workers) >= maxWorkers {
		r.dropStale(now)
		if len(r.workers) >= maxWorkers {
			return false
		}
	}
	r.workers[h.ID] = Worker{
		ID: h.ID, Name: h.Name, Queues: slices.Clone(h.Queues), Types: slices.Clone(h.Types),
		Concurrency: h.Concurrency, InFlight: h.InFlight, StartedAt: h.StartedAt.UTC(), Version: h.Version,
		LastSeen: now.UTC(), interval: h.Interval(),
	}
	return true
}

// List returns the workers heard from in the last DropAfter, by name and
// then id, with Alive set; it drops the others.
func (r *Registry) List() []Worker {
	now := r.now()
	r.mu.Lock()
	r.dropStale(now)
	out := make([]Worker, 0, len(r.workers))
	for _, w := range r.workers {
		w.Alive = now.Sub(w.LastSeen) <= AliveIntervals*w.interval
		out = append(out, w)
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b Worker) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID))
	})
	return out
}

// dropStale drops the workers not seen for DropAfter; r.mu is held.
func (r *Registry) dropStale(now time.Time) {
	for id, w := range r.workers {
		if now.Sub(w.LastSeen) > DropAfter {
			delete(r.workers, id)
		}
	}
}
