package broker

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// blockState follows connection.blocked / connection.unblocked for a
// publisher: while the broker blocks the connection (a memory or disk
// alarm), publishes wait, boundedly, instead of piling up in the socket.
type blockState struct {
	maxWait time.Duration
	log     *slog.Logger

	mu        sync.Mutex
	reason    string        // why the broker blocks us; "" when not blocked
	unblocked chan struct{} // closed when the current block ends
	since     time.Time
}

func newBlockState(maxWait time.Duration, log *slog.Logger) *blockState {
	return &blockState{maxWait: maxWait, log: log}
}

// follow applies the broker's notifications until the channel closes
// (the connection closed): a closed connection is no longer blocked.
func (b *blockState) follow(notes <-chan amqp.Blocking) {
	for n := range notes {
		b.set(n.Active, n.Reason)
	}
	b.set(false, "")
}

func (b *blockState) set(active bool, reason string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case active && b.unblocked == nil:
		b.reason, b.unblocked, b.since = reason, make(chan struct{}), time.Now()
		b.log.Warn("broker: the broker blocks publishing (memory or disk alarm); publishes wait", "reason", reason, "max_wait", b.maxWait)
	case !active && b.unblocked != nil:
		close(b.unblocked)
		b.log.Info("broker: publishing unblocked", "blocked_for", time.Since(b.since).Round(time.Millisecond))
		b.reason, b.unblocked = "", nil
	}
}

// wait returns nil when the connection is not blocked, or once it is
// unblocked; ErrBlocked after maxWait; ctx's error if ctx ends first.
func (b *blockState) wait(ctx context.Context) error {
	b.mu.Lock()
	unblocked, reason := b.unblocked, b.reason
	b.mu.Unlock()
	if unblocked == nil {
		return nil
	}
	t := time.NewTimer(b.maxWait)
	defer t.Stop()
	select {
	case <-unblocked:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w (%s): %w", ErrBlocked, reason, ctx.Err())
	case <-t.C:
		return fmt.Errorf("%w (%s) for more than %s", ErrBlocked, reason, b.maxWait)
	}
}
