package wire_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/wire"
	"github.com/warrenhq/warren/protocol"
)

var names = protocol.NamesFor("p.")

// The relay's task message: persistent JSON with the wire protocol's ids
// and headers, to the jobs exchange.
func TestTasksSingle(t *testing.T) {
	t.Parallel()
	out, err := wire.Tasks(names, wire.TaskMessage{JobID: "job", Type: "echo", Retries: 0, MaxRetries: 2,
		Tasks: []protocol.BatchTask{{TaskID: 1, Payload: json.RawMessage(`{"i":1}`)}}})
	require.NoError(t, err)
	require.Equal(t, names.JobsExchange, out.Exchange)
	require.Equal(t, protocol.RoutingKeyTask, out.Key)
	d := out.Msg
	require.Equal(t, protocol.MessageID("job", 1), d.MessageId)
	require.Equal(t, "job", d.CorrelationId)
	require.Equal(t, "echo", d.Type)
	require.Equal(t, protocol.ContentType, d.ContentType)
	require.Equal(t, amqp.Persistent, d.DeliveryMode)
	require.EqualValues(t, 0, d.Headers[protocol.HeaderRetry])
	require.EqualValues(t, 2, d.Headers[protocol.HeaderMaxRetries])
	require.Equal(t, amqp.Table{protocol.HeaderRetry: int64(0), protocol.HeaderMaxRetries: int64(2)}, d.Headers, "int64 headers, nothing else")
	require.WithinDuration(t, time.Now(), d.Timestamp, time.Minute)
	task, err := protocol.DecodeTask(d.Body)
	require.NoError(t, err)
	require.Equal(t, protocol.Task{JobID: "job", TaskID: 1, Payload: json.RawMessage(`{"i":1}`)}, task)
}

func TestTasksBatch(t *testing.T) {
	t.Parallel()
	out, err := wire.Tasks(names, wire.TaskMessage{JobID: "job", Type: "echo", Retries: 2, MaxRetries: 4,
		Tasks: []protocol.BatchTask{{TaskID: 3, Payload: json.RawMessage(`1`)}, {TaskID: 5}}})
	require.NoError(t, err)
	d := out.Msg
	require.Equal(t, "job", d.CorrelationId)
	require.Equal(t, "echo", d.Type)
	require.Equal(t, amqp.Persistent, d.DeliveryMode)
	require.EqualValues(t, 2, d.Headers[protocol.HeaderRetry])
	require.EqualValues(t, 4, d.Headers[protocol.HeaderMaxRetries])
	require.JSONEq(t, `{"job_id":"job","tasks":[{"task_id":3,"payload":1},{"task_id":5,"payload":null}]}`, string(d.Body))
	ts, batch, err := protocol.DecodeTasks(d.Body)
	require.NoError(t, err)
	require.True(t, batch)
	require.Equal(t, protocol.BatchMessageID("job", ts[0].TaskID, len(ts)), d.MessageId)
}

func TestTasksRefusesWhatCannotBeEncoded(t *testing.T) {
	t.Parallel()
	_, err := wire.Tasks(names, wire.TaskMessage{JobID: "job"})
	require.ErrorIs(t, err, protocol.ErrMalformed)
	_, err = wire.Tasks(names, wire.TaskMessage{Tasks: []protocol.BatchTask{{TaskID: 1}}})
	require.ErrorIs(t, err, protocol.ErrMalformed, "no job id")
}

// taskDelivery is a delivery of the work queue with the relay's headers
// and some of another system's.
func taskDelivery(body string, retries, maxRetries int64) amqp.Delivery {
	return amqp.Delivery{
		ConsumerTag: "c", DeliveryTag: 3, Exchange: names.JobsExchange, RoutingKey: protocol.RoutingKeyTask,
		ContentType: protocol.ContentType, DeliveryMode: amqp.Persistent, MessageId: "job:1", CorrelationId: "job",
		Type: "echo", Expiration: "60000", UserId: "someone",
		Headers: amqp.Table{protocol.HeaderRetry: retries, protocol.HeaderMaxRetries: maxRetries,
			"traceparent": "00-abc", "x-delivery-count": int64(2)},
		Body: []byte(body),
	}
}

func TestReadTask(t *testing.T) {
	t.Parallel()
	d := taskDelivery(`{"job_id":"job","task_id":1,"payload":{"x":1}}`, 2, 5)
	d.Redelivered = true
	m := wire.ReadTask(d)
	require.NoError(t, m.Malformed)
	require.False(t, m.Batch)
	require.Equal(t, []protocol.Task{{JobID: "job", TaskID: 1, Payload: json.RawMessage(`{"x":1}`)}}, m.Tasks)
	require.Equal(t, "echo", m.Type)
	require.Equal(t, 2, m.Retries)
	require.Equal(t, 3, m.Attempt())
	require.Equal(t, 5, m.MaxRetries)
	require.True(t, m.Redelivered)

	batch := wire.ReadTask(taskDelivery(`{"job_id":"job","tasks":[{"task_id":1},{"task_id":2}]}`, 0, 1))
	require.True(t, batch.Batch)
	require.Len(t, batch.Tasks, 2)

	// Headers another client wrote in other types, or not at all.
	d = taskDelivery(`{"job_id":"job","task_id":1}`, 0, 0)
	d.Headers = amqp.Table{protocol.HeaderRetry: "3", protocol.HeaderMaxRetries: -1}
	m = wire.ReadTask(d)
	require.Equal(t, 3, m.Retries)
	require.Equal(t, warren.DefaultMaxRetries, m.MaxRetries)

	bad := wire.ReadTask(taskDelivery(`{"job_id":"job","tasks":[]}`, 1, 1))
	require.ErrorIs(t, bad.Malformed, protocol.ErrMalformed)
	require.Empty(t, bad.Tasks)
	require.False(t, bad.Batch, "a malformed message is settled whole")
	require.Equal(t, 2, bad.Attempt())
}

// The retry copy: x-retry incremented, every other header and property
// kept but the user and the expiration, to the tier of the delay.
func TestRetry(t *testing.T) {
	t.Parallel()
	d := taskDelivery(`{"job_id":"job","task_id":1}`, 1, 5)
	m := wire.ReadTask(d)
	out := m.Retry(names, m.Tasks[0], 30*time.Second)
	require.Equal(t, names.RetryExchange, out.Exchange)
	require.Equal(t, "30s", out.Key)
	require.Equal(t, amqp.Table{protocol.HeaderRetry: int64(2), protocol.HeaderMaxRetries: int64(5),
		"traceparent": "00-abc", "x-delivery-count": int64(2)}, out.Msg.Headers)
	require.Equal(t, int64(1), d.Headers[protocol.HeaderRetry], "the delivery's headers must not change")
	require.Empty(t, out.Msg.Expiration, "the tier alone sets the delay")
	require.Empty(t, out.Msg.UserId)
	require.Equal(t, "job:1", out.Msg.MessageId)
	require.Equal(t, "echo", out.Msg.Type)
	require.Equal(t, amqp.Persistent, out.Msg.DeliveryMode)
	require.Equal(t, d.Body, out.Msg.Body, "a single task message is copied byte for byte")
}

func TestDeadLetter(t *testing.T) {
	t.Parallel()
	m := wire.ReadTask(taskDelivery(`{"job_id":"job","task_id":1}`, 3, 3))
	failed := time.Date(2026, 1, 2, 3, 4, 5, 600, time.FixedZone("x", 3600))
	started := failed.Add(-time.Second)
	out := m.DeadLetter(names, m.Tasks[0], wire.Failure{Reason: protocol.ReasonRetriesExhausted, Error: "boom",
		Worker: "w1", StartedAt: started, FailedAt: failed})
	require.Equal(t, names.DeadLetterExchange, out.Exchange)
	require.Equal(t, protocol.RoutingKeyTaskFailed, out.Key)
	require.Equal(t, amqp.Table{
		protocol.HeaderRetry: int64(3), protocol.HeaderMaxRetries: int64(3), "traceparent": "00-abc", "x-delivery-count": int64(2),
		protocol.HeaderReason: protocol.ReasonRetriesExhausted, protocol.HeaderError: "boom", protocol.HeaderWorker: "w1",
		protocol.HeaderFailedAt: "2026-01-02T02:04:05.0000006Z", protocol.HeaderStartedAt: "2026-01-02T02:04:04.0000006Z",
	}, out.Msg.Headers)
	require.Empty(t, out.Msg.Expiration)

	// A task that did not run has no start; a copy of a dead letter loses
	// the one it had. The error is cut to what fits in a frame.
	d := taskDelivery(`{"job_id":"job","task_id":1}`, 0, 3)
	d.Headers[protocol.HeaderStartedAt] = "2026-01-01T00:00:00Z"
	m = wire.ReadTask(d)
	long := string(make([]byte, 5000))
	out = m.DeadLetter(names, m.Tasks[0], wire.Failure{Reason: protocol.ReasonUnknownType, Error: long, FailedAt: failed})
	require.NotContains(t, out.Msg.Headers, protocol.HeaderStartedAt)
	require.Len(t, out.Msg.Headers[protocol.HeaderError], 4096)
}

// A message that is not a task is dead-lettered whole, with an id even
// when it had none.
func TestDeadLetterOfAMalformedMessage(t *testing.T) {
	t.Parallel()
	d := taskDelivery(`not json`, 0, 3)
	d.MessageId = ""
	m := wire.ReadTask(d)
	out := m.DeadLetter(names, protocol.Task{}, wire.Failure{Reason: protocol.ReasonMalformed, Error: m.Malformed.Error(), FailedAt: time.Now()})
	require.Equal(t, []byte(`not json`), out.Msg.Body)
	require.Equal(t, "malformed:c:3", out.Msg.MessageId)
	require.Equal(t, protocol.ReasonMalformed, out.Msg.Headers[protocol.HeaderReason])
}

// Each task of a batch leaves as its own single task message, with the
// batch's properties and headers.
func TestCopiesOfABatchTask(t *testing.T) {
	t.Parallel()
	d := taskDelivery(`{"job_id":"job","tasks":[{"task_id":4,"payload":"a"},{"task_id":5,"payload":"b"}]}`, 1, 3)
	d.MessageId = protocol.BatchMessageID("job", 4, 2)
	m := wire.ReadTask(d)
	for _, out := range []wire.Outbound{
		m.Split(m.Tasks[1]),
		m.Retry(names, m.Tasks[1], time.Second),
		m.DeadLetter(names, m.Tasks[1], wire.Failure{Reason: protocol.ReasonPermanent, Error: errors.New("bad").Error(), FailedAt: time.Now()}),
	} {
		require.Equal(t, "job:5", out.Msg.MessageId)
		require.JSONEq(t, `{"job_id":"job","task_id":5,"payload":"b"}`, string(out.Msg.Body))
		require.Equal(t, "echo", out.Msg.Type)
		require.Equal(t, "job", out.Msg.CorrelationId)
		require.Equal(t, "00-abc", out.Msg.Headers["traceparent"])
	}
	split := m.Split(m.Tasks[0])
	require.Equal(t, names.JobsExchange, split.Exchange, "where the batch came from")
	require.Equal(t, protocol.RoutingKeyTask, split.Key)
	require.Equal(t, amqp.Table{protocol.HeaderRetry: int64(1), protocol.HeaderMaxRetries: int64(3), "traceparent": "00-abc"},
		split.Msg.Headers, "the batch's headers but x-delivery-count")
	require.Equal(t, "60000", split.Msg.Expiration)
}
