package broker_test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/protocol"
)

// Waiting sees a ready message in any queue it is given, and only a
// ready one: a message delivered and not yet acknowledged is not waiting.
func TestWaitingSeesReadyMessages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	names, conn := amqptest.Topology(t, &broker.TopologyOptions{RetryTiers: shortTiers})
	tier := names.RetryQueue(protocol.RetryTierName(shortTiers[1]))
	queues := []string{names.ResultsQueue, tier, names.TasksQueue}

	waiting, err := broker.Waiting(ctx, conn, queues...)
	require.NoError(t, err)
	require.False(t, waiting, "empty queues")

	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	require.NoError(t, ch.PublishWithContext(ctx, "", names.TasksQueue, true, false, amqp.Publishing{Body: []byte("x")}))
	require.Eventually(t, func() bool {
		waiting, err := broker.Waiting(ctx, conn, queues...)
		require.NoError(t, err)
		return waiting
	}, 10*time.Second, 10*time.Millisecond, "a message in the work queue")

	// Taken and held unacknowledged, it no longer waits.
	held, err := conn.Channel()
	require.NoError(t, err)
	defer held.Close()
	require.Eventually(t, func() bool {
		_, ok, err := held.Get(names.TasksQueue, false)
		require.NoError(t, err)
		return ok
	}, 10*time.Second, 10*time.Millisecond)
	waiting, err = broker.Waiting(ctx, conn, queues...)
	require.NoError(t, err)
	require.False(t, waiting, "a message delivered and not acknowledged")

	_, err = broker.Waiting(ctx, conn, names.Prefix+"no-such.q")
	require.ErrorContains(t, err, "no-such.q")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = broker.Waiting(cancelled, conn, queues...)
	require.ErrorIs(t, err, context.Canceled)
}
