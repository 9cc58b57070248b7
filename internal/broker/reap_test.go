package broker_test

import (
	"context"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/protocol"
)

// exists reports whether queue exists, on a channel of its own (a
// passive declare of a missing queue closes its channel).
func exists(t *testing.T, conn *amqp.Connection, queue string) bool {
	t.Helper()
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer func() { _ = ch.Close() }()
	_, err = ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if broker.IsNotFound(err) {
		return false
	}
	require.NoError(t, err)
	return true
}

// An unbound work queue returns what is published to it; declaring it
// again binds it back.
func TestUnbindWorkQueueReturnsPublishesUntilDeclaredAgain(t *testing.T) {
	t.Parallel()
	names, conn := amqptest.Topology(t, &broker.TopologyOptions{RetryTiers: shortTiers})
	t.Cleanup(func() { _ = broker.DeleteWorkQueue(conn, names, "gpu", shortTiers...) })
	opts := &broker.TopologyOptions{RetryTiers: shortTiers}
	require.NoError(t, broker.DeclareWorkQueue(conn, names, "gpu", opts))
	pub, err := broker.NewPublisher(conn, nil)
	require.NoError(t, err)
	defer func() { _ = pub.Close() }()
	publish := func() error {
		return pub.PublishAlone(context.Background(), names.JobsExchange, protocol.TaskRoutingKey("gpu"), amqp.Publishing{MessageId: "m1", Body: []byte("{}")})
	}

	require.NoError(t, broker.UnbindWorkQueue(conn, names, "gpu"))
	require.NoError(t, broker.UnbindWorkQueue(conn, names, "gpu"), "unbinding twice is harmless")
	require.ErrorIs(t, publish(), broker.ErrUnroutable, "a publish to an unbound queue is returned, not stored")
	require.NoError(t, broker.DeclareWorkQueue(conn, names, "gpu", opts))
	require.NoError(t, publish())
	require.Equal(t, 1, amqptest.QueueDepth(t, conn, names.WorkQueue("gpu")))
}

// DeleteIdleWorkQueue deletes a work queue and its tiers only while none
// holds a message and the queue has no consumer; it never deletes the
// default queue.
func TestDeleteIdleWorkQueueDeletesOnlyAnIdleQueue(t *testing.T) {
	t.Parallel()
	names, conn := amqptest.Topology(t, &broker.TopologyOptions{RetryTiers: shortTiers})
	t.Cleanup(func() { _ = broker.DeleteWorkQueue(conn, names, "gpu", shortTiers...) })
	opts := &broker.TopologyOptions{RetryTiers: shortTiers}
	require.NoError(t, broker.DeclareWorkQueue(conn, names, "gpu", opts))
	tier := names.QueueRetryQueue("gpu", protocol.RetryTierName(shortTiers[1]))

	// A consumer keeps it.
	ch, _, err := broker.Consume(conn, names.WorkQueue("gpu"), "", 1)
	require.NoError(t, err)
	deleted, lost, err := broker.DeleteIdleWorkQueue(conn, names, "gpu", opts)
	require.NoError(t, err)
	require.False(t, deleted, "it has a consumer")
	require.Zero(t, lost)
	require.NoError(t, ch.Close())

	// A message in a retry tier keeps it.
	pch, err := conn.Channel()
	require.NoError(t, err)
	defer func() { _ = pch.Close() }()
	require.NoError(t, pch.Publish("", tier, false, false, amqp.Publishing{Body: []byte("{}"), Expiration: "60000"}))
	require.Eventually(t, func() bool { return amqptest.QueueDepth(t, conn, tier) == 1 }, 5e9, 1e7)
	deleted, _, err = broker.DeleteIdleWorkQueue(conn, names, "gpu", opts)
	require.NoError(t, err)
	require.False(t, deleted, "a tier holds a message")
	require.True(t, exists(t, conn, names.WorkQueue("gpu")))
	_, err = pch.QueuePurge(tier, false)
	require.NoError(t, err)

	deleted, lost, err = broker.DeleteIdleWorkQueue(conn, names, "gpu", opts)
	require.NoError(t, err)
	require.True(t, deleted)
	require.Zero(t, lost)
	require.False(t, exists(t, conn, names.WorkQueue("gpu")))
	require.False(t, exists(t, conn, tier))
	require.False(t, conn.IsClosed(), "no if-empty/if-unused: RabbitMQ closes the connection over them on quorum queues")

	deleted, _, err = broker.DeleteIdleWorkQueue(conn, names, "gpu", opts)
	require.NoError(t, err, "deleting what does not exist is not an error")
	require.True(t, deleted)

	_, _, err = broker.DeleteIdleWorkQueue(conn, names, protocol.DefaultQueue, opts)
	require.Error(t, err, "the default queue is never deleted")
	require.True(t, exists(t, conn, names.TasksQueue))
}
