// Package backoff is the one exponential backoff every warren loop uses
// when it retries something that failed: reconnecting to the broker,
// recording a batch in the store, publishing the outbox.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy is exponential backoff: the first retry waits Min, each next one
// twice as long, up to Max.
type Policy struct {
	// Min is the first delay. Must be > 0.
	Min time.Duration
	// Max caps the delay.
	Max time.Duration
	// Jitter spreads each delay uniformly over d*(1-Jitter) to
	// d*(1+Jitter), so that many processes that lost the same broker do
	// not retry in step; 0 means none, and it must stay below 1.
	Jitter float64
}

// Delay is the wait before the nth retry (1 for the first).
func (p Policy) Delay(n int) time.Duration {
	d := p.Min
	for i := 1; i < n && d < p.Max; i++ {
		d *= 2
	}
	d = min(d, p.Max)
	if p.Jitter > 0 {
		d = time.Duration(float64(d) * (1 - p.Jitter + 2*p.Jitter*rand.Float64()))
	}
	return d
}

// Backoff counts consecutive failures under a Policy. The zero value is
// not usable; make one with New. It is not safe for concurrent use.
type Backoff struct {
	p Policy
	n int
}

// New returns a Backoff with no failure counted.
func New(p Policy) *Backoff { return &Backoff{p: p} }

// Next counts one more failure and returns how long to wait before the
// next attempt.
func (b *Backoff) Next() time.Duration {
	b.n++
	return b.p.Delay(b.n)
}

// Reset forgets the failures after a success.
func (b *Backoff) Reset() { b.n = 0 }

// Sleep waits d or until ctx is done; it reports whether d elapsed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
