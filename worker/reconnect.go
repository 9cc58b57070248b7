package worker

import (
	"context"
	"math/rand/v2"
	"time"
)

// Reconnect backoff: the first attempt after a loss waits about
// minReconnectBackoff, each failed one doubles the wait up to
// Config.ReconnectBackoffMax, and every wait is spread by
// +-reconnectJitter so that workers that lost the broker together do not
// all come back in the same instant.
const (
	minReconnectBackoff = 100 * time.Millisecond
	reconnectJitter     = 0.2
)

// reconnectBackoff is the wait before reconnect attempt n (from 1),
// jittered.
func reconnectBackoff(n int, limit time.Duration) time.Duration {
	d := minReconnectBackoff
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	return time.Duration(float64(d) * (1 - reconnectJitter + 2*reconnectJitter*rand.Float64()))
}

// backoff is the wait before reconnect attempt n.
func (w *Worker) backoff(n int) time.Duration {
	if w.testHookBackoff != nil {
		return w.testHookBackoff(n)
	}
	return reconnectBackoff(n, w.cfg.ReconnectBackoffMax)
}

// sleep waits d and reports true, or false as soon as ctx is done.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
