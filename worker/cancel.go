package worker

import (
	"container/list"
	"sync"
	"time"
)

// Bounds of the set of cancelled jobs a worker remembers. A job's tasks
// are all published soon after it is submitted, so a day covers any task
// still queued when its job is cancelled; a task that outlives both bounds
// runs, and its result is ignored because the job is closed.
const (
	maxCancelledJobs = 100_000
	cancelledJobTTL  = 24 * time.Hour
)

// cancelSet is a bounded set of job ids, oldest first: adding beyond limit
// evicts the oldest, and ids older than ttl are forgotten. It is safe for
// concurrent use.
type cancelSet struct {
	limit int
	ttl   time.Duration
	now   func() time.Time

	mu    sync.Mutex
	byID  map[string]*list.Element // of *cancelled
	order list.List                // of *cancelled, oldest at the front
}

type cancelled struct {
	jobID string
	at    time.Time
}

func newCancelSet(limit int, ttl time.Duration, now func() time.Time) *cancelSet {
	return &cancelSet{limit: limit, ttl: ttl, now: now, byID: make(map[string]*list.Element)}
}

// add records that jobID is cancelled, now; a job cancelled again is
// remembered from the later time.
func (c *cancelSet) add(jobID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if e, ok := c.byID[jobID]; ok {
		e.Value.(*cancelled).at = now
		c.order.MoveToBack(e)
	} else {
		c.byID[jobID] = c.order.PushBack(&cancelled{jobID: jobID, at: now})
	}
	for c.order.Len() > 0 {
		oldest := c.order.Front().Value.(*cancelled)
		if c.order.Len() <= c.limit && now.Sub(oldest.at) < c.ttl {
			break
		}
		c.order.Remove(c.order.Front())
		delete(c.byID, oldest.jobID)
	}
}

// has reports whether jobID was cancelled less than ttl ago.
func (c *cancelSet) has(jobID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byID[jobID]
	return ok && c.now().Sub(e.Value.(*cancelled).at) < c.ttl
}

// len is the number of ids held, expired ones not yet dropped included.
func (c *cancelSet) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
