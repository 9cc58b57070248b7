package wire_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/wire"
	"github.com/warrenhq/warren/protocol"
)

var deadAt = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// workerDead is a single task dead-lettered by a worker after 3 retries.
func workerDead() amqp.Delivery {
	return amqp.Delivery{
		MessageId: "job:1", RoutingKey: protocol.RoutingKeyTaskFailed, Type: "echo", CorrelationId: "job",
		Headers: amqp.Table{
			protocol.HeaderRetry: int64(3), protocol.HeaderMaxRetries: int64(3), "x-delivery-count": int64(9),
			protocol.HeaderReason: protocol.ReasonRetriesExhausted, protocol.HeaderError: "boom",
			protocol.HeaderWorker: "w1", protocol.HeaderFailedAt: deadAt.Format(time.RFC3339Nano),
			protocol.HeaderStartedAt: deadAt.Add(-time.Second).Format(time.RFC3339Nano),
		},
		Body: []byte(`{"job_id":"job","task_id":1,"payload":{"i":1}}`),
	}
}

// A retry tier's death, as a task that waited in one carries it.
func tierDeath(at time.Time) amqp.Table {
	return amqp.Table{"queue": names.RetryQueue("1s"), "reason": "expired", "count": int64(1), "time": at}
}

func TestReadDeadLetterOfAWorker(t *testing.T) {
	t.Parallel()
	d := workerDead()
	d.Headers["x-death"] = []any{tierDeath(deadAt.Add(-time.Minute))}
	dl := wire.ReadDeadLetter(d)
	require.NoError(t, dl.Malformed)
	require.Equal(t, "job", dl.JobID)
	require.EqualValues(t, 1, dl.TaskID)
	require.Equal(t, "job:1", dl.MessageID)
	require.Equal(t, protocol.RoutingKeyTaskFailed, dl.RoutingKey)
	require.Equal(t, protocol.ReasonRetriesExhausted, dl.Reason, "the worker's reason, not the tier's expiry")
	require.False(t, dl.ByBroker)
	require.Equal(t, "boom", dl.Error)
	require.Equal(t, "w1", dl.Worker)
	require.Equal(t, deadAt, dl.FailedAt)
	require.Equal(t, deadAt.Add(-time.Second), dl.StartedAt)
	require.Equal(t, 4, dl.Attempts(), "x-retry + 1; the dead-letter queue's own deliveries do not count")
	require.Equal(t, "retries_exhausted: boom", dl.TaskError())

	delete(d.Headers, protocol.HeaderError)
	delete(d.Headers, protocol.HeaderFailedAt)
	dl = wire.ReadDeadLetter(d)
	require.Equal(t, "retries_exhausted: retries_exhausted", dl.TaskError(), "the reason stands for a missing text")
	require.Equal(t, deadAt.Add(-time.Minute), dl.FailedAt, "without x-failed-at, the broker's last death says when")
}

// The broker's most recent dead-lettering is the first x-death entry,
// not x-first-death-*, which a retry tier's expiry keeps for good.
func TestReadDeadLetterOfTheBroker(t *testing.T) {
	t.Parallel()
	d := amqp.Delivery{MessageId: "job:4", Headers: amqp.Table{
		protocol.HeaderRetry: int64(1),
		"x-death": []any{
			amqp.Table{"queue": names.TasksQueue, "reason": "delivery_limit", "count": int64(1), "time": deadAt},
			tierDeath(deadAt.Add(-time.Minute)),
		},
		"x-first-death-reason": "expired", "x-first-death-queue": names.RetryQueue("1s"),
	}, Body: []byte(`{"job_id":"job","task_id":4}`)}
	dl := wire.ReadDeadLetter(d)
	require.True(t, dl.ByBroker)
	require.Equal(t, protocol.ReasonDeliveryLimit, dl.Reason)
	require.Equal(t, wire.Death{Reason: protocol.ReasonDeliveryLimit, Queue: names.TasksQueue, Time: deadAt}, dl.Death)
	require.Equal(t, fmt.Sprintf("dead-lettered by the broker from %q: delivery_limit", names.TasksQueue), dl.Error)
	require.Equal(t, dl.Error+" (the task was delivered too many times without an ack; it may crash its worker)", dl.TaskError())
	require.Equal(t, deadAt, dl.FailedAt)
	require.Equal(t, 2, dl.Attempts())

	// Without x-death: x-last-death-*, then x-first-death-*, without a time.
	d.Headers = amqp.Table{"x-first-death-reason": "rejected", "x-first-death-queue": "q1"}
	dl = wire.ReadDeadLetter(d)
	require.Equal(t, wire.Death{Reason: protocol.ReasonRejected, Queue: "q1"}, dl.Death)
	require.Equal(t, `dead-lettered by the broker from "q1": rejected`, dl.TaskError())
	require.True(t, dl.FailedAt.IsZero())
	d.Headers["x-last-death-reason"], d.Headers["x-last-death-queue"] = "expired", "q2"
	require.Equal(t, wire.Death{Reason: protocol.ReasonExpired, Queue: "q2"}, wire.ReadDeadLetter(d).Death)
}

func TestReadDeadLetterWithoutAReason(t *testing.T) {
	t.Parallel()
	dl := wire.ReadDeadLetter(amqp.Delivery{Body: []byte(`{"job_id":"job","task_id":4}`)})
	require.Equal(t, wire.ReasonUnknown, dl.Reason)
	require.False(t, dl.ByBroker)
	require.Empty(t, dl.Error)
	require.Equal(t, "unknown: unknown", dl.TaskError())
	require.True(t, dl.FailedAt.IsZero())
	require.Equal(t, 1, dl.Attempts())
}

// A dead letter whose body is not a task keeps what can be read of its
// ids: from the body, else from the message id.
func TestReadDeadLetterOfAMalformedMessage(t *testing.T) {
	t.Parallel()
	dl := wire.ReadDeadLetter(amqp.Delivery{MessageId: "m-2", Body: []byte(`{"job_id":"job-m","task_id":"x"}`)})
	require.ErrorIs(t, dl.Malformed, protocol.ErrMalformed)
	require.Equal(t, protocol.ReasonMalformed, dl.Reason)
	require.Equal(t, "job-m", dl.JobID)
	require.Zero(t, dl.TaskID)
	require.Contains(t, dl.Error, "malformed message")

	d := workerDead()
	d.Body = []byte("not json")
	d.MessageId = "job-m:7"
	d.Headers[protocol.HeaderReason], d.Headers[protocol.HeaderError] = protocol.ReasonMalformed, "not a task"
	dl = wire.ReadDeadLetter(d)
	require.Equal(t, "job-m", dl.JobID)
	require.EqualValues(t, 7, dl.TaskID)
	require.Equal(t, "not a task", dl.Error, "the worker's text first")
}

// deep is a JSON value nested deeper than Go's decoder accepts.
var deep = strings.Repeat("[", 10_001) + strings.Repeat("]", 10_001)

// A malformed dead letter still tells its tasks when its body or its
// message id names them: the body's ids, read past payloads too deep to
// decode, else the message id's task or batch range.
func TestReadDeadLetterRecoversTheTasksOfAMalformedMessage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, id, body string
		job            string
		want           []int64
	}{
		{"a task with a deep payload", "", `{"job_id":"j","task_id":7,"payload":` + deep + `}`, "j", []int64{7}},
		{"a batch with a deep payload, and gaps the message id does not show", "j:3+2",
			`{"job_id":"j","tasks":[{"task_id":3,"payload":` + deep + `},{"payload":{"task_id":9},"task_id":5}]}`, "j", []int64{3, 5}},
		{"ids after a deep value", "", `{"x":` + deep + `,"job_id":"j","task_id":2}`, "j", []int64{2}},
		{"a batch out of order, a task twice", "", `{"job_id":"j","tasks":[{"task_id":5},{"task_id":3},{"task_id":5}]}`, "j", []int64{3, 5}},
		{"garbage with a task's message id", "j:9", "\x00garbage", "j", []int64{9}},
		{"garbage with a batch's message id", "j:4+3", "not json", "j", []int64{4, 5, 6}},
		{"a job id with colons", "a:b:4+2", "not json", "a:b", []int64{4, 5}},
		{"a body cut short: the message id", "j:1+3", `{"job_id":"j","tasks":[{"task_id":1},{"task_id":2}`, "j", []int64{1, 2, 3}},
		{"a batch with a task_id too: the message id", "j:1+2", `{"job_id":"j","task_id":1,"tasks":[{"task_id":1},{"task_id":2}]}`, "j", []int64{1, 2}},
		{"a task without a usable id: the message id", "j:1+2", `{"job_id":"j","tasks":[{"task_id":1},{"task_id":"2"}]}`, "j", []int64{1, 2}},
		{"the body's job, another job's message id", "k:1", `{"job_id":"j","task_id":"x"}`, "j", nil},
		{"a job id that is not a string", "", `{"job_id":{"job_id":"j"},"task_id":2}`, "", nil},
		{"a batch id up to the last task id", "j:9223372036854775806+2", "not json", "j", []int64{9223372036854775806, 9223372036854775807}},
		{"a body naming no job", "", `{"task_id":1}`, "", nil},
		{"no id at all", "raw-1", "not json", "", nil},
		{"a batch id counting nothing", "j:1+0", "not json", "", nil},
		{"a batch id from task 0", "j:0+2", "not json", "", nil},
		{"a batch id counting more than a batch holds", "j:1+1001", "not json", "", nil},
		{"a batch id past the last task id", "j:9223372036854775807+2", "not json", "", nil},
		{"a batch id without a job", ":1+2", "not json", "", nil},
	}
	for _, tt := range tests {
		dl := wire.ReadDeadLetter(amqp.Delivery{MessageId: tt.id, Body: []byte(tt.body)})
		require.ErrorIs(t, dl.Malformed, protocol.ErrMalformed, tt.name)
		require.Equal(t, tt.job, dl.JobID, tt.name)
		require.Equal(t, tt.want, dl.TaskIDs, tt.name)
		if len(tt.want) > 0 {
			require.Equal(t, tt.want[0], dl.TaskID, tt.name)
		}
	}

	// A batch of more tasks than a batch may hold names none of them.
	ids := make([]string, protocol.MaxBatchSize+1)
	for i := range ids {
		ids[i] = fmt.Sprintf(`{"task_id":%d}`, i+1)
	}
	dl := wire.ReadDeadLetter(amqp.Delivery{Body: []byte(`{"job_id":"j","tasks":[` + strings.Join(ids, ",") + `]}`)})
	require.ErrorIs(t, dl.Malformed, protocol.ErrMalformed)
	require.Empty(t, dl.TaskIDs)

	// A task message's tasks are in Tasks.
	require.Nil(t, wire.ReadDeadLetter(workerDead()).TaskIDs)
}

func TestReadDeadLetterOfABatch(t *testing.T) {
	t.Parallel()
	dl := wire.ReadDeadLetter(amqp.Delivery{Body: []byte(`{"job_id":"job","tasks":[{"task_id":2},{"task_id":3}]}`)})
	require.True(t, dl.Batch)
	require.Len(t, dl.Tasks, 2)
	require.EqualValues(t, 2, dl.TaskID, "the first task names the message")
}

// A replay is the task message again: retries reset, at the generation the
// store reopened the task at, the failure headers dropped, the others
// kept; the user is left out.
func TestReplay(t *testing.T) {
	t.Parallel()
	d := workerDead()
	d.UserId, d.ContentType = "guest", ""
	d.Headers["traceparent"] = "00-abc"
	d.Headers[protocol.HeaderGeneration] = int64(1)
	d.Headers["x-death"] = []any{tierDeath(deadAt)}
	d.Headers["x-first-death-reason"], d.Headers["x-first-death-queue"], d.Headers["x-first-death-exchange"] = "expired", "q", "x"
	dl := wire.ReadDeadLetter(d)
	require.Equal(t, 1, dl.Generation)
	out, err := dl.Replay(names, dl.Tasks[0], 2)
	require.NoError(t, err)
	require.Equal(t, names.JobsExchange, out.Exchange)
	require.Equal(t, protocol.RoutingKeyTask, out.Key)
	require.Equal(t, amqp.Table{
		protocol.HeaderRetry: int64(0), protocol.HeaderMaxRetries: int64(3), "traceparent": "00-abc",
		protocol.HeaderStartedAt: deadAt.Add(-time.Second).Format(time.RFC3339Nano), protocol.HeaderGeneration: int64(2),
	}, out.Msg.Headers)
	require.Equal(t, d.Body, out.Msg.Body)
	require.Equal(t, "job:1", out.Msg.MessageId)
	require.Equal(t, protocol.ContentType, out.Msg.ContentType)
	require.Equal(t, amqp.Persistent, out.Msg.DeliveryMode)
	require.Empty(t, out.Msg.UserId)

	batch := wire.ReadDeadLetter(amqp.Delivery{MessageId: "job:2+2", Headers: amqp.Table{},
		Body: []byte(`{"job_id":"job","tasks":[{"task_id":2,"payload":"a"},{"task_id":3,"payload":"b"}]}`)})
	out, err = batch.Replay(names, batch.Tasks[1], 3)
	require.NoError(t, err)
	require.Equal(t, "job:3", out.Msg.MessageId)
	require.Equal(t, int64(3), out.Msg.Headers[protocol.HeaderGeneration])
	require.JSONEq(t, `{"job_id":"job","task_id":3,"payload":"b"}`, string(out.Msg.Body))

	_, err = batch.Replay(names, protocol.Task{}, 1)
	require.ErrorIs(t, err, protocol.ErrMalformed)
}

func TestWithoutBodies(t *testing.T) {
	t.Parallel()
	dl := wire.ReadDeadLetter(workerDead())
	light := dl.WithoutBodies()
	require.Nil(t, light.Tasks[0].Payload)
	require.NotNil(t, dl.Tasks[0].Payload, "dl itself keeps its payloads")
	require.Equal(t, dl.TaskID, light.TaskID)
}
