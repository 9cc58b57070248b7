// Package heartbeats keeps a server's list of the workers it hears from:
// every worker publishes a heartbeat (protocol.Heartbeat) to the
// heartbeat exchange every few seconds, and every server binds a queue of
// its own to it (Consumer), so that every server sees every worker. The
// list lives in memory only: a server that starts knows the workers after
// their next heartbeat.
//
// The list is advisory: it says which workers a server heard from, not
// which exist. Anyone who may publish to the heartbeat exchange can add
// to it, so it is bounded (MaxWorkers entries, MaxBytes in all), and an
// entry belongs to the broker user that first published its id (the
// heartbeat's validated user_id, see Consumer): heartbeats from another
// user, a goodbye included, leave it alone.
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

// MaxWorkers bounds the list: heartbeats from more workers than that (a
// flood of made-up ids) are ignored until some are dropped.
const MaxWorkers = 10000

// MaxBytes bounds the memory of the list, as entrySize counts it: a
// heartbeat may carry about 0.5 MB of queues and types, and one that
// would take the list past MaxBytes is ignored (a known worker keeps its
// last entry) until some are dropped. 16 MiB holds 10,000 workers of
// about 1.6 KB each, or 30 of the largest heartbeats.
const MaxBytes = 16 << 20

// entryOverhead is what entrySize counts for a worker besides its text:
// the map entry, the Worker and its slice headers.
const entryOverhead = 256

// stringOverhead is what entrySize counts for each string besides its
// bytes: its header.
const stringOverhead = 16

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
	// User is the broker user that published its first heartbeat, as
	// RabbitMQ validated it (user_id); "" when that heartbeat carried
	// none.
	User string

	interval time.Duration
	size     int64
}

// Registry is the list of workers heard from. It is safe for concurrent
// use.
type Registry struct {
	now func() time.Time

	mu      sync.Mutex
	workers map[string]Worker
	// bytes is the sum of the workers' entrySize.
	bytes int64
}

// NewRegistry returns an empty registry reading the time from now (nil
// means time.Now).
func NewRegistry(now func() time.Time) *Registry {
	if now == nil {
		now = time.Now
	}
	return &Registry{now: now, workers: make(map[string]Worker)}
}

// Apply records heartbeat h, received now, as published by no
// particular user: ApplyFrom(h, "").
func (r *Registry) Apply(h protocol.Heartbeat) bool {
	return r.ApplyFrom(h, "")
}

// Known reports whether the registry holds worker id.
func (r *Registry) Known(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.workers[id]
	return ok
}

// ApplyFrom records heartbeat h, received now, published by broker user
// user ("" for a heartbeat without user_id): a worker that said goodbye
// (protocol.HeartbeatStopping) is dropped at once. A heartbeat whose id
// another user registered is ignored, a goodbye too, so that no one can
// drop or rewrite the entry of a worker that publishes as another user;
// a heartbeat without user_id only touches an entry registered without
// one. It reports whether h was recorded: false when it was ignored so,
// or when the list is full (MaxWorkers, MaxBytes) of others.
func (r *Registry) ApplyFrom(h protocol.Heartbeat, user string) bool {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	old, known := r.workers[h.ID]
	if known && old.User != user {
		return false
	}
	if h.State == protocol.HeartbeatStopping {
		r.remove(h.ID)
		return true
	}
	w := Worker{
		ID: h.ID, Name: h.Name, Queues: slices.Clone(h.Queues), Types: slices.Clone(h.Types),
		Concurrency: h.Concurrency, InFlight: h.InFlight, StartedAt: h.StartedAt.UTC(), Version: h.Version,
		LastSeen: now.UTC(), User: user, interval: h.Interval(),
	}
	w.size = entrySize(w)
	if !r.fits(w, old.size, known, now) {
		return false
	}
	r.bytes += w.size - old.size
	r.workers[h.ID] = w
	return true
}

// fits reports whether w may take the place of an entry of size oldSize
// (known says there is one) within MaxWorkers and MaxBytes, dropping the
// stale entries first when it would not; r.mu is held.
func (r *Registry) fits(w Worker, oldSize int64, known bool, now time.Time) bool {
	full := func() bool {
		return (!known && len(r.workers) >= MaxWorkers) || r.bytes-oldSize+w.size > MaxBytes
	}
	if full() {
		r.dropStale(now)
	}
	return !full()
}

// Bytes returns the memory of the list as MaxBytes counts it.
func (r *Registry) Bytes() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bytes
}

// entrySize is what w counts against MaxBytes: its strings, and a fixed
// overhead for the rest.
func entrySize(w Worker) int64 {
	n := int64(entryOverhead + len(w.ID) + len(w.Name) + len(w.Version) + len(w.User) + 4*stringOverhead)
	for _, list := range [][]string{w.Queues, w.Types} {
		for _, s := range list {
			n += int64(len(s) + stringOverhead)
		}
	}
	return n
}

// remove drops the worker id; r.mu is held.
func (r *Registry) remove(id string) {
	if w, ok := r.workers[id]; ok {
		r.bytes -= w.size
		delete(r.workers, id)
	}
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
			r.remove(id)
		}
	}
}
