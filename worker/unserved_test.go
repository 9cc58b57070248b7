package worker_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/wire"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/worker"
)

// unservedTiers are the retry tiers of the unserved-type tests: short
// enough for a test, and growing, as a bounce's wait does.
var unservedTiers = []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, time.Second}

// A worker without the task's handler does not fail the task: it goes
// back, and a worker that serves its type, started later, runs it.
func TestAnUnservedTypeWaitsForAWorkerThatServesIt(t *testing.T) {
	t.Parallel()
	b := setupTiers(t, unservedTiers)
	var runs atomic.Int64
	other := b.start(t, worker.Config{Name: "w-other"}, map[string]worker.HandlerFunc{
		taskType: func(context.Context, worker.Task) (any, error) { runs.Add(1); return nil, nil },
	})
	b.publishTask(t, "resize", "job-unserved", 1, `{}`, amqp.Table{protocol.HeaderRetry: int64(1), protocol.HeaderMaxRetries: int64(3)})

	ev := other.expect(t, worker.EventUnserved)[0]
	require.Equal(t, "job-unserved", ev.JobID)
	require.Equal(t, "resize", ev.Type)
	require.Equal(t, 2, ev.Attempt)
	require.Equal(t, unservedTiers[0], ev.Delay, "the first bounce waits the first tier")
	require.ErrorContains(t, ev.Err, `no handler for task type "resize"`)

	resized := make(chan worker.Task, 1)
	serving := b.start(t, worker.Config{Name: "w-resize"}, map[string]worker.HandlerFunc{
		"resize": func(_ context.Context, tk worker.Task) (any, error) { resized <- tk; return "ok", nil },
	})
	tk := recv(t, resized, "the task on the worker that serves its type")
	require.Equal(t, 2, tk.Attempt, "bounces are no retries")
	serving.expect(t, worker.EventCompleted)
	res, d := b.result(t)
	require.Equal(t, protocol.StatusCompleted, res.Status)
	require.Equal(t, "w-resize", res.Worker)
	require.NotNil(t, d)
	require.NoError(t, other.stop())
	require.Zero(t, runs.Load())
	require.Zero(t, b.depth(t, b.names.DeadQueue), "an unserved type must not be dead-lettered while it waits")
}

// A task that no worker serves is failed unknown_type once it has gone
// unserved for its task timeout: not at once (it was, before), and
// without a hot loop in between.
func TestAnUnservedTypeFailsAfterItsTaskTimeout(t *testing.T) {
	t.Parallel()
	b := setupTiers(t, unservedTiers)
	rw := b.start(t, worker.Config{Name: "w-types"}, map[string]worker.HandlerFunc{
		taskType: func(context.Context, worker.Task) (any, error) { return nil, nil },
	})
	const timeout = time.Second
	start := time.Now()
	b.publishTask(t, "resize", "job-i", 1, `{}`, amqp.Table{protocol.HeaderMaxRetries: int64(3),
		protocol.HeaderTaskTimeout: timeout.Milliseconds()})

	bounces := 0
	var ev worker.Event
	for ev = recv(t, rw.events, "event"); ev.Kind == worker.EventUnserved; ev = recv(t, rw.events, "event") {
		bounces++
	}
	elapsed := time.Since(start)
	require.Equal(t, worker.EventDeadLettered, ev.Kind, "%+v", ev)
	require.Equal(t, protocol.ReasonUnknownType, ev.Reason)
	require.GreaterOrEqual(t, elapsed, timeout, "the task must wait out its timeout")
	require.Less(t, elapsed, timeout+unservedTiers[1]+time.Second, "the clear end comes about when it is due")
	// 100 ms, 300 ms, then 300 ms while the second tier fits in the time
	// left, then the first: a handful, not a loop.
	require.GreaterOrEqual(t, bounces, 3)
	require.LessOrEqual(t, bounces, 8, "bounces in %v", elapsed)
	for _, q := range []string{b.names.TasksDLQ, b.names.DeadQueue} {
		d := b.get(t, q)
		requireDeadLetter(t, d, protocol.ReasonUnknownType, `no live worker serves type "resize" on queue "default" (for 1s)`, "w-types")
		require.Equal(t, int64(0), d.Headers[protocol.HeaderRetry], "bounces are no retries")
		require.Equal(t, int64(bounces), d.Headers[protocol.HeaderUnserved])
		require.Equal(t, "resize", d.Type)
	}
	require.NoError(t, rw.stop())
	require.Zero(t, b.depth(t, b.names.TasksQueue))
}

// A task message without a type can be served by no worker: it is
// dead-lettered at once.
func TestATaskWithoutATypeIsDeadLetteredAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rw := b.start(t, worker.Config{Name: "w-types"}, map[string]worker.HandlerFunc{
		taskType: func(context.Context, worker.Task) (any, error) { return nil, nil },
	})
	b.publishTask(t, "", "job-notype", 1, `{}`, nil)
	ev := rw.expect(t, worker.EventDeadLettered)[0]
	require.Equal(t, protocol.ReasonUnknownType, ev.Reason)
	require.ErrorContains(t, ev.Err, "no type property")
}

// A batch of an unserved type goes back as single tasks, each one
// counted.
func TestAnUnservedBatchGoesBackTaskByTask(t *testing.T) {
	t.Parallel()
	b := setupTiers(t, unservedTiers)
	rw := b.start(t, worker.Config{Name: "w-types"}, map[string]worker.HandlerFunc{
		taskType: func(context.Context, worker.Task) (any, error) { return nil, nil },
	})
	out, err := wire.Tasks(b.names, wire.TaskMessage{JobID: "job-batch", Type: "resize", MaxRetries: 3, Tasks: []protocol.BatchTask{
		{TaskID: 1, Payload: json.RawMessage(`1`)}, {TaskID: 2, Payload: json.RawMessage(`2`)}}})
	require.NoError(t, err)
	b.publish(t, out.Msg)
	evs := rw.expect(t, worker.EventUnserved, worker.EventUnserved)
	require.Equal(t, []int64{1, 2}, []int64{evs[0].TaskID, evs[1].TaskID})
	require.NoError(t, rw.stop())
	require.Zero(t, b.depth(t, b.names.DeadQueue))
}

// A reduce task of a type this worker has no reducer for (a handler for
// the type is not one) waits as a task does, then fails unknown_type.
func TestAReduceTaskWithoutAReducerWaitsThenFails(t *testing.T) {
	t.Parallel()
	b := setupTiers(t, unservedTiers)
	rw := b.start(t, worker.Config{Name: "w-reduce"}, map[string]worker.HandlerFunc{reduceType: square})
	out, err := wire.Tasks(b.names, wire.TaskMessage{JobID: "job-unknown", Type: reduceType, Reduce: true, ExpectedTasks: 3,
		Tasks: []protocol.BatchTask{{TaskID: protocol.ReduceTaskID, Payload: json.RawMessage(`null`)}}, MaxRetries: 3, Generation: 3,
		Timeout: 300 * time.Millisecond})
	require.NoError(t, err)
	b.publish(t, out.Msg)

	ev := rw.expect(t, worker.EventUnserved)[0]
	require.ErrorContains(t, ev.Err, `no reducer for task type "sum"`)
	for ev = recv(t, rw.events, "event"); ev.Kind == worker.EventUnserved; ev = recv(t, rw.events, "event") {
	}
	require.Equal(t, worker.EventDeadLettered, ev.Kind)
	require.Equal(t, protocol.ReasonUnknownType, ev.Reason)
	require.ErrorContains(t, ev.Err, `no live worker has a reducer for type "sum" on queue "default" (for 300ms)`)
}
