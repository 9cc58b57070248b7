package protocol_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/protocol"
)

func TestQueueNamesAndRoutingKeys(t *testing.T) {
	t.Parallel()
	n := protocol.NamesFor("p-")
	for _, q := range []string{"", protocol.DefaultQueue} {
		require.Equal(t, "p-tasks.q", n.WorkQueue(q))
		require.Equal(t, "p-retry.5s.q", n.QueueRetryQueue(q, "5s"))
		require.Equal(t, protocol.RoutingKeyTask, protocol.TaskRoutingKey(q))
		require.Equal(t, "5s", protocol.RetryRoutingKey(q, "5s"))
	}
	require.Equal(t, "p-tasks.gpu.q", n.WorkQueue("gpu"))
	require.Equal(t, "p-retry.gpu.5s.q", n.QueueRetryQueue("gpu", "5s"))
	require.Equal(t, "task.gpu", protocol.TaskRoutingKey("gpu"))
	require.Equal(t, "gpu.5s", protocol.RetryRoutingKey("gpu", "5s"))

	for _, ok := range []string{"gpu", "a", "thumb-nails_2", strings.Repeat("x", 64)} {
		require.NoError(t, protocol.CheckQueueName(ok), ok)
	}
	for _, bad := range []string{"", "GPU", "a.b", "a b", "é", strings.Repeat("x", 65)} {
		require.Error(t, protocol.CheckQueueName(bad), bad)
	}
	qs, err := protocol.ParseQueues(" a, b ,a,")
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, qs)
	qs, err = protocol.ParseQueues("")
	require.NoError(t, err)
	require.Equal(t, []string{protocol.DefaultQueue}, qs)
	_, err = protocol.ParseQueues("a,B")
	require.ErrorContains(t, err, `"B"`)
}
