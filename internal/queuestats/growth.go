// Package queuestats keeps a server's samples of its dead-letter queues'
// depths, from which GET /v1/queues tells how much each grew over the
// last minute and the last fifteen.
package queuestats

import (
	"sync"
	"time"
)

// SampleInterval is how often the server samples the dead-letter queues.
const SampleInterval = 15 * time.Second

// keep is how long samples are kept: the longest window asked for, and a
// sample interval to find its start.
const keep = 15*time.Minute + 2*SampleInterval

// Growth holds the depths sampled of a set of queues. It is safe for
// concurrent use.
type Growth struct {
	mu      sync.Mutex
	samples map[string][]sample // oldest first
}

type sample struct {
	at    time.Time
	depth int64
}

// NewGrowth returns an empty Growth.
func NewGrowth() *Growth { return &Growth{samples: make(map[string][]sample)} }

// Record notes that queue held depth messages at at; samples older than
// the longest window are dropped.
func (g *Growth) Record(queue string, depth int64, at time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := append(g.samples[queue], sample{at, depth})
	cut := 0
	for cut < len(s)-1 && at.Sub(s[cut+1].at) >= keep {
		cut++
	}
	g.samples[queue] = s[cut:]
}

// Since returns how much queue grew from the sample taken window before
// now (the newest one at least that old) to depth, its depth now; ok is
// false when no sample is that old yet, or the oldest that old is more
// than two sample intervals older (the server was cut off meanwhile). A
// queue that shrank (replayed, purged) grew by a negative number.
func (g *Growth) Since(queue string, depth int64, window time.Duration, now time.Time) (growth int64, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.samples[queue]
	start := now.Add(-window)
	for i := len(s) - 1; i >= 0; i-- {
		if !s[i].at.After(start) {
			if start.Sub(s[i].at) > 2*SampleInterval {
				return 0, false
			}
			return depth - s[i].depth, true
		}
	}
	return 0, false
}
