package wire

import (
	"strings"
	"testing"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/protocol"
)

// retriesSoFar and maxRetries are what the worker read of a task
// delivery's headers before ReadTask did it.
func retriesSoFar(h amqp.Table) int { return ReadTask(amqp.Delivery{Headers: h}).Retries }
func maxRetries(h amqp.Table) int   { return ReadTask(amqp.Delivery{Headers: h}).MaxRetries }

func TestRetryHeaders(t *testing.T) {
	t.Parallel()
	require.Equal(t, 0, retriesSoFar(nil))
	require.Equal(t, warren.DefaultMaxRetries, maxRetries(nil))
	h := amqp.Table{protocol.HeaderRetry: int32(4), protocol.HeaderMaxRetries: int8(0)}
	require.Equal(t, 4, retriesSoFar(h))
	require.Equal(t, 0, maxRetries(h))
}

func TestTruncateKeepsUTF8(t *testing.T) {
	t.Parallel()
	s := strings.Repeat("é", 10) // 2 bytes each
	require.Equal(t, s, truncate(s, 20))
	got := truncate(s, 5)
	require.Equal(t, "éé", got)
	require.True(t, utf8.ValidString(got))
}

func TestCopyOfKeepsTheMessageButNotTheUser(t *testing.T) {
	t.Parallel()
	d := amqp.Delivery{
		ConsumerTag:   "tag",
		Headers:       amqp.Table{"x-retry": int64(1), "traceparent": "00-abc"},
		ContentType:   protocol.ContentType,
		CorrelationId: "job",
		MessageId:     "job:1",
		Type:          "t",
		UserId:        "someone-else",
		Expiration:    "60000",
		Body:          []byte(`{"job_id": "job", "task_id": 1}`),
	}
	msg := copyOf(d, protocol.Task{JobID: "job", TaskID: 1})
	msg.Headers["x-retry"] = int64(2)
	require.Equal(t, int64(1), d.Headers["x-retry"], "the delivery's headers must not change")
	require.Equal(t, "00-abc", msg.Headers["traceparent"])
	require.Equal(t, "job:1", msg.MessageId)
	require.Equal(t, "job", msg.CorrelationId)
	require.Equal(t, "t", msg.Type)
	require.Equal(t, "60000", msg.Expiration)
	require.Empty(t, msg.UserId)
	require.Equal(t, amqp.Persistent, msg.DeliveryMode)
	require.Equal(t, d.Body, msg.Body)

	d.MessageId = ""
	require.Equal(t, "job:1", copyOf(d, protocol.Task{JobID: "job", TaskID: 1}).MessageId)
	d.DeliveryTag = 7
	require.Equal(t, "malformed:tag:7", copyOf(d, protocol.Task{}).MessageId)
}

func TestLookupIntAcceptsEveryIntegerType(t *testing.T) {
	t.Parallel()
	for _, v := range []any{int(2), int8(2), int16(2), int32(2), int64(2), uint8(2), uint16(2), uint32(2), uint64(2), float32(2), float64(2), "2"} {
		n, ok := lookupInt(amqp.Table{"k": v}, "k")
		require.True(t, ok, "%T", v)
		require.Equal(t, 2, n, "%T", v)
	}
	for _, v := range []any{nil, int64(-1), 2.5, "two", true, int64(1) << 40, []byte("2")} {
		_, ok := lookupInt(amqp.Table{"k": v}, "k")
		require.False(t, ok, "%T %v", v, v)
	}
}
