package relay_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/internal/relay"
)

// With a window, the relay publishes only what brings the work queue's
// ready messages up to the window, and nothing while less than half of it
// is free; the rest of the backlog stays in the store.
func TestRelayKeepsAWindowOfMessagesInTheWorkQueue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createJob(t, 100)
	prober := broker.NewProber(b.conn)
	t.Cleanup(prober.Close)
	r, err := relay.New(relay.Config{Store: b.store, Publisher: b.pub, Names: b.names, Window: 30,
		Depth: func(q string) (broker.QueueDepth, error) { return prober.Depth(b.names.WorkQueue(q)) }})
	require.NoError(t, err)

	n, err := r.RelayOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 30, n, "a window's worth")
	n, err = r.RelayOnce(context.Background())
	require.NoError(t, err)
	require.Zero(t, n, "the window is full")
	require.Equal(t, 30, amqptest.QueueDepth(t, b.conn, b.names.TasksQueue))
	backlog, err := b.store.Backlog(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 70, backlog, "the rest waits in the store")

	// Workers take 2: less than half of the window is free.
	ch, err := b.conn.Channel()
	require.NoError(t, err)
	defer func() { _ = ch.Close() }()
	take := func(k int) {
		for range k {
			_, ok, err := ch.Get(b.names.TasksQueue, true)
			require.NoError(t, err)
			require.True(t, ok)
		}
	}
	take(2)
	n, err = r.RelayOnce(context.Background())
	require.NoError(t, err)
	require.Zero(t, n, "2 free of 30: not worth a round")
	take(14)
	n, err = r.RelayOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 16, n, "refilled to the window")
	require.Equal(t, 30, amqptest.QueueDepth(t, b.conn, b.names.TasksQueue))
}
