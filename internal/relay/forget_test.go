package relay_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/internal/relay"
)

// A work queue unbound or deleted under the relay (by another server's
// queue reaper) is declared again before the relay publishes to it once
// more, even when the round that found it gone confirmed other tasks.
func TestRelayDeclaresAgainAQueueRemovedUnderIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	t.Cleanup(func() { _ = broker.DeleteWorkQueue(b.conn, b.names, "gpu") })
	var declares atomic.Int32
	r, err := relay.New(relay.Config{Store: b.store, Publisher: b.pub, Names: b.names,
		Declare: func(q string) error {
			declares.Add(1)
			return broker.DeclareWorkQueue(b.conn, b.names, q, nil)
		}})
	require.NoError(t, err)
	ctx := context.Background()
	b.createJobWith(t, warren.Policy{Queue: "gpu"}, 1)
	n, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.EqualValues(t, 1, declares.Load())

	require.NoError(t, broker.UnbindWorkQueue(b.conn, b.names, "gpu"))
	b.createJobWith(t, warren.Policy{Queue: "gpu"}, 1)
	b.createJob(t, 1) // the default queue's: this round confirms something
	_, err = r.RelayOnce(ctx)
	require.NoError(t, err)
	n, err = r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the returned task goes out at the next round")
	require.EqualValues(t, 2, declares.Load(), "after declaring its queue again")
	require.Equal(t, 2, amqptest.QueueDepth(t, b.conn, b.names.WorkQueue("gpu")))

	// Forget (the local reaper's hook) makes it declare the queue again.
	r.ForgetQueue("gpu")
	b.createJobWith(t, warren.Policy{Queue: "gpu"}, 1)
	_, err = r.RelayOnce(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 3, declares.Load())
}
