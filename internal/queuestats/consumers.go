package queuestats

import (
	"sync"
	"time"
)

// Consumers remembers, of each work queue read, since when it has had no
// consumer: the reason a job there makes no progress, shown as its
// "waiting" (GET /v1/jobs/{id}). It is safe for concurrent use.
type Consumers struct {
	mu    sync.Mutex
	since map[string]time.Time // queues without a consumer, since their first reading so
}

// NewConsumers returns a Consumers that knows no queue.
func NewConsumers() *Consumers { return &Consumers{since: make(map[string]time.Time)} }

// Observe records that queue had consumers consumers at at. A reading
// older than one already recorded with no consumer does not move its
// start.
func (c *Consumers) Observe(queue string, consumers int, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if consumers > 0 {
		delete(c.since, queue)
		return
	}
	if s, ok := c.since[queue]; !ok || at.Before(s) {
		c.since[queue] = at
	}
}

// NoneSince returns since when queue has had no consumer, by the
// readings recorded; ok is false when its last reading saw one, or none
// was recorded.
func (c *Consumers) NoneSince(queue string) (since time.Time, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	since, ok = c.since[queue]
	return since, ok
}

// Forget drops what is known of queue (it was deleted).
func (c *Consumers) Forget(queue string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.since, queue)
}
