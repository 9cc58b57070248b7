package broker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// The broker's blocked/unblocked notifications drive the wait. (A real
// memory alarm blocks every publisher on the broker, so the chaos suite
// exercises that end to end, not the parallel unit tests.)
func TestBlockStateFollowsTheBroker(t *testing.T) {
	t.Parallel()
	b := newBlockState(50*time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)))
	notes := make(chan amqp.Blocking)
	done := make(chan struct{})
	go func() { b.follow(notes); close(done) }()
	ctx := context.Background()

	require.NoError(t, b.wait(ctx), "not blocked")
	notes <- amqp.Blocking{Active: true, Reason: "low on memory"}
	// follow has received the note; it records it right after.
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.unblocked != nil
	}, 5*time.Second, time.Millisecond)
	err := b.wait(ctx)
	require.ErrorIs(t, err, ErrBlocked)
	require.Contains(t, err.Error(), "low on memory")

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	require.True(t, errors.Is(b.wait(cctx), context.Canceled))

	waited := make(chan error, 1)
	b.maxWait = time.Minute
	go func() { waited <- b.wait(ctx) }()
	notes <- amqp.Blocking{Active: false}
	require.NoError(t, <-waited, "unblocking releases the waiters")

	notes <- amqp.Blocking{Active: true, Reason: "disk"}
	close(notes) // the connection closed
	<-done
	require.NoError(t, b.wait(ctx), "a closed connection is not blocked")
}
