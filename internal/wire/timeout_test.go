package wire_test

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/wire"
	"github.com/warrenhq/warren/protocol"
)

// A task message carries its job's task timeout in whole milliseconds,
// the worker reads it, and every copy that settles the tasks (retry,
// dead letter, split) keeps it, so each run of a task has the same limit.
func TestTaskTimeoutTravelsWithTheTasks(t *testing.T) {
	t.Parallel()
	out, err := wire.Tasks(names, wire.TaskMessage{JobID: "job", Type: "echo", Timeout: 90 * time.Second,
		Tasks: []protocol.BatchTask{{TaskID: 1}, {TaskID: 2}}})
	require.NoError(t, err)
	require.Equal(t, int64(90000), out.Msg.Headers[protocol.HeaderTaskTimeout])

	m := wire.ReadTask(amqp.Delivery{Headers: out.Msg.Headers, Body: out.Msg.Body, MessageId: out.Msg.MessageId})
	require.Equal(t, 90*time.Second, m.Timeout)
	for name, c := range map[string]wire.Outbound{
		"retry":       m.Retry(names, m.Tasks[0], time.Second),
		"dead letter": m.DeadLetter(names, m.Tasks[1], wire.Failure{Reason: protocol.ReasonRetriesExhausted, Error: "slow", FailedAt: time.Now()}),
		"split":       m.Split(m.Tasks[1]),
	} {
		require.Equal(t, int64(90000), c.Msg.Headers[protocol.HeaderTaskTimeout], name)
		require.Equal(t, 90*time.Second, wire.ReadTask(amqp.Delivery{Headers: c.Msg.Headers, Body: c.Msg.Body}).Timeout, name)
	}
	results, err := m.Results(names, []protocol.Result{{JobID: "job", TaskID: 1, Result: json.RawMessage(`1`)}})
	require.NoError(t, err)
	require.NotContains(t, results.Msg.Headers, protocol.HeaderTaskTimeout, "a result has no run left to limit")
}

// A limit is written as a positive whole number of milliseconds: a
// fraction rounds up (a limit never becomes none), and a limit longer
// than the header can carry is the longest it can.
func TestTaskTimeoutHeaderRounding(t *testing.T) {
	t.Parallel()
	for timeout, want := range map[time.Duration]int64{
		time.Second:                             1000,
		1500*time.Millisecond + time.Nanosecond: 1501,
		time.Microsecond:                        1,
		30 * 24 * time.Hour:                     math.MaxInt32,
	} {
		out, err := wire.Tasks(names, wire.TaskMessage{JobID: "job", Timeout: timeout, Tasks: []protocol.BatchTask{{TaskID: 1}}})
		require.NoError(t, err)
		require.Equal(t, want, out.Msg.Headers[protocol.HeaderTaskTimeout], "timeout %s", timeout)
	}
}

// Without the header (an older relay, another producer) a task runs
// without a limit, and so does one whose header is not a positive
// integer; other clients' integer types are read.
func TestNoTaskTimeoutIsNoLimit(t *testing.T) {
	t.Parallel()
	out, err := wire.Tasks(names, wire.TaskMessage{JobID: "job", Type: "echo", Tasks: []protocol.BatchTask{{TaskID: 1}}})
	require.NoError(t, err)
	require.NotContains(t, out.Msg.Headers, protocol.HeaderTaskTimeout)

	m := wire.ReadTask(taskDelivery(`{"job_id":"job","task_id":1}`, 0, 3))
	require.Zero(t, m.Timeout)
	require.NotContains(t, m.Retry(names, m.Tasks[0], time.Second).Msg.Headers, protocol.HeaderTaskTimeout)

	read := func(v any) time.Duration {
		d := taskDelivery(`{"job_id":"job","task_id":1}`, 0, 3)
		d.Headers[protocol.HeaderTaskTimeout] = v
		return wire.ReadTask(d).Timeout
	}
	require.Equal(t, 250*time.Millisecond, read(int32(250)))
	require.Equal(t, 2500*time.Millisecond, read("2500"))
	require.Equal(t, 5*time.Second, read(float64(5000)))
	for _, bad := range []any{int64(0), int64(-1000), "5s", 1.5, int64(math.MaxInt32) + 1, true} {
		require.Zero(t, read(bad), "x-task-timeout %#v", bad)
	}
}
