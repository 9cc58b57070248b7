package wire_test

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/wire"
	"github.com/warrenhq/warren/protocol"
)

// The copy of a task no handler serves: to the tier of the delay, x-retry
// kept (it did not run), x-unserved counted, the first bounce's time set
// once and kept after, the delivery count dropped.
func TestUnserved(t *testing.T) {
	t.Parallel()
	d := taskDelivery(`{"job_id":"job","task_id":1}`, 1, 5)
	m := wire.ReadTask(d)
	require.Zero(t, m.Bounces)
	require.True(t, m.FirstUnservedAt.IsZero())
	first := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	out := m.Unserved(names, m.Tasks[0], time.Second, first)
	require.Equal(t, names.RetryExchange, out.Exchange)
	require.Equal(t, "1s", out.Key)
	require.Equal(t, amqp.Table{protocol.HeaderRetry: int64(1), protocol.HeaderMaxRetries: int64(5), "traceparent": "00-abc",
		protocol.HeaderUnserved: int64(1), protocol.HeaderFirstUnservedAt: "2026-01-02T03:04:05Z"}, out.Msg.Headers)
	require.Empty(t, out.Msg.Expiration)
	require.Equal(t, d.Body, out.Msg.Body)

	again := wire.ReadTask(amqp.Delivery{Body: out.Msg.Body, Headers: out.Msg.Headers, Type: out.Msg.Type, MessageId: out.Msg.MessageId})
	require.Equal(t, 1, again.Bounces)
	require.Equal(t, first, again.FirstUnservedAt)
	out = again.Unserved(names, again.Tasks[0], 5*time.Second, first.Add(time.Minute))
	require.Equal(t, "5s", out.Key)
	require.Equal(t, int64(2), out.Msg.Headers[protocol.HeaderUnserved])
	require.Equal(t, "2026-01-02T03:04:05Z", out.Msg.Headers[protocol.HeaderFirstUnservedAt], "the clear end counts from the first bounce")
}
