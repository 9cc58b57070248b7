package worker

import (
	"time"

	"github.com/warrenhq/warren/internal/backoff"
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
	return backoff.Policy{Min: minReconnectBackoff, Max: limit, Jitter: reconnectJitter}.Delay(n)
}

// backoff is the wait before reconnect attempt n.
func (w *Worker) backoff(n int) time.Duration {
	if w.testHookBackoff != nil {
		return w.testHookBackoff(n)
	}
	return reconnectBackoff(n, w.cfg.ReconnectBackoffMax)
}
