package broker_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/protocol"
)

// DeleteInstallation refuses while a queue of the prefix has a consumer,
// deletes everything of the prefix with force or once none has, and
// leaves other prefixes alone.
func TestDeleteInstallationDeletesEveryQueueAndExchangeOfThePrefix(t *testing.T) {
	t.Parallel()
	names, conn := amqptest.Topology(t, nil)
	other, _ := amqptest.Topology(t, nil)
	require.NoError(t, broker.DeclareWorkQueue(conn, names, "gpu", nil))
	t.Cleanup(func() { _ = broker.DeleteWorkQueue(conn, names, "gpu") })

	ch, _, err := broker.Consume(conn, names.WorkQueue("gpu"), "", 1)
	require.NoError(t, err)
	td, err := broker.DeleteInstallation(conn, names, []string{"gpu"}, false)
	require.NoError(t, err)
	require.Equal(t, []broker.DeletedQueue{{Name: names.WorkQueue("gpu"), Consumers: 1}}, td.Consumed)
	require.Empty(t, td.Queues, "refused: nothing deleted")
	require.True(t, exists(t, conn, names.TasksQueue))
	require.NoError(t, ch.Close())

	td, err = broker.DeleteInstallation(conn, names, []string{"gpu", protocol.DefaultQueue}, false)
	require.NoError(t, err)
	require.Empty(t, td.Consumed)
	want := broker.InstallationQueues(names, []string{"gpu"})
	var deleted []string
	for _, q := range td.Queues {
		deleted = append(deleted, q.Name)
	}
	require.Equal(t, want, deleted, "every queue, in order")
	require.Len(t, td.Exchanges, 6)
	for _, q := range want {
		require.False(t, exists(t, conn, q), q)
	}
	pch, err := conn.Channel()
	require.NoError(t, err)
	err = pch.ExchangeDeclarePassive(names.JobsExchange, "direct", true, false, false, false, nil)
	require.True(t, broker.IsNotFound(err), "the exchanges are gone: %v", err)
	require.True(t, exists(t, conn, other.TasksQueue), "another prefix is left alone")

	td, err = broker.DeleteInstallation(conn, names, []string{"gpu"}, false)
	require.NoError(t, err)
	require.Empty(t, td.Queues, "nothing left to delete")
	require.Empty(t, td.Exchanges)
}
