package wire_test

import (
	"encoding/json"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/wire"
	"github.com/warrenhq/warren/protocol"
)

// A task message carries its tasks' generation, and every copy that
// settles them (retry, dead letter, split, result) carries it on, so the
// store can tell an outcome of an earlier copy from the current one.
func TestGenerationTravelsWithTheTasks(t *testing.T) {
	t.Parallel()
	out, err := wire.Tasks(names, wire.TaskMessage{JobID: "job", Type: "echo", MaxRetries: 2, Generation: 3,
		Tasks: []protocol.BatchTask{{TaskID: 1}, {TaskID: 2}}})
	require.NoError(t, err)
	require.Equal(t, int64(3), out.Msg.Headers[protocol.HeaderGeneration])

	m := wire.ReadTask(amqp.Delivery{Headers: out.Msg.Headers, Body: out.Msg.Body, MessageId: out.Msg.MessageId})
	require.Equal(t, 3, m.Generation)
	for name, c := range map[string]wire.Outbound{
		"retry":       m.Retry(names, m.Tasks[0], time.Second),
		"dead letter": m.DeadLetter(names, m.Tasks[1], wire.Failure{Reason: protocol.ReasonPermanent, Error: "no", FailedAt: time.Now()}),
		"split":       m.Split(m.Tasks[1]),
	} {
		require.Equal(t, int64(3), c.Msg.Headers[protocol.HeaderGeneration], name)
	}
	results, err := m.Results(names, []protocol.Result{
		{JobID: "job", TaskID: 1, Result: json.RawMessage(`1`)}, {JobID: "job", TaskID: 2, Result: json.RawMessage(`2`)}})
	require.NoError(t, err)
	require.Equal(t, amqp.Table{protocol.HeaderGeneration: int64(3)}, results.Msg.Headers)
	require.Contains(t, string(results.Msg.Body), `"results"`, "a result batch answers a task batch")
	require.Equal(t, 3, wire.Generation(amqp.Delivery{Headers: results.Msg.Headers}), "as the aggregator reads it")

	dl := wire.ReadDeadLetter(amqp.Delivery{Headers: m.DeadLetter(names, m.Tasks[0], wire.Failure{}).Msg.Headers,
		Body: []byte(`{"job_id":"job","task_id":1}`)})
	require.Equal(t, 3, dl.Generation)
}

// A message without the header is of an unknown generation (0), and so
// are its copies: a worker in another language may copy nothing, and
// warren accepts its outcomes.
func TestNoGenerationIsUnknown(t *testing.T) {
	t.Parallel()
	out, err := wire.Tasks(names, wire.TaskMessage{JobID: "job", Type: "echo", Tasks: []protocol.BatchTask{{TaskID: 1}}})
	require.NoError(t, err)
	require.NotContains(t, out.Msg.Headers, protocol.HeaderGeneration)

	m := wire.ReadTask(taskDelivery(`{"job_id":"job","task_id":1}`, 0, 3))
	require.Zero(t, m.Generation)
	results, err := m.Results(names, []protocol.Result{{JobID: "job", TaskID: 1, Result: json.RawMessage(`1`)}})
	require.NoError(t, err)
	require.Empty(t, results.Msg.Headers)
	require.Zero(t, wire.Generation(amqp.Delivery{}))

	// Other clients' integer types, and what is not a generation.
	require.Equal(t, 4, wire.Generation(amqp.Delivery{Headers: amqp.Table{protocol.HeaderGeneration: int32(4)}}))
	require.Equal(t, 4, wire.Generation(amqp.Delivery{Headers: amqp.Table{protocol.HeaderGeneration: "4"}}))
	require.Zero(t, wire.Generation(amqp.Delivery{Headers: amqp.Table{protocol.HeaderGeneration: int64(-1)}}))
	require.Zero(t, wire.Generation(amqp.Delivery{Headers: amqp.Table{protocol.HeaderGeneration: "x"}}))
}
