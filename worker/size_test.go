package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/worker"
)

// A task message over the worker's MaxMessageBytes is not read or run: it
// is dead-lettered whole, with the reason too_large, so that its tasks
// fail at once instead of costing the worker the memory the limit bounds.
func TestRunDeadLettersATaskMessageOverMaxMessageBytes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var runs atomic.Int64
	rw := b.start(t, worker.Config{Name: "w-size", MaxMessageBytes: 64 << 10, MaxResultBytes: 1 << 10}, map[string]worker.HandlerFunc{
		taskType: func(context.Context, worker.Task) (any, error) { runs.Add(1); return 1, nil },
	})
	big := `"` + strings.Repeat("x", 100<<10) + `"`
	b.publishTask(t, taskType, "job-big", 4, big, retries(3))
	b.publishTask(t, taskType, "job-big", 5, `"small"`, retries(3))

	kinds := map[worker.EventKind]worker.Event{}
	for range 2 {
		ev := recv(t, rw.events, "event")
		kinds[ev.Kind] = ev
	}
	require.Len(t, kinds, 2, "one dead letter, one completed task, in either order")
	require.EqualValues(t, 5, kinds[worker.EventCompleted].TaskID)
	dead := kinds[worker.EventDeadLettered]
	require.Equal(t, protocol.ReasonTooLarge, dead.Reason)
	require.Contains(t, dead.Err.Error(), "over this worker's limit of 65536")
	for _, q := range []string{b.names.TasksDLQ, b.names.DeadQueue} {
		d := b.get(t, q)
		requireDeadLetter(t, d, protocol.ReasonTooLarge, "bytes, over this worker's limit", "w-size")
		require.Equal(t, protocol.MessageID("job-big", 4), d.MessageId, "the id names the task, in %s", q)
		var task protocol.Task
		require.NoError(t, json.Unmarshal(d.Body, &task), "the message is kept whole, in %s", q)
		require.Equal(t, big, string(task.Payload))
	}
	require.NoError(t, rw.stop())
	require.EqualValues(t, 1, runs.Load(), "only the small task ran")
}

// A result over MaxResultBytes fails its task for good, with the reason
// result_too_large: the same input would give the same result.
func TestRunFailsAResultOverMaxResultBytes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var runs atomic.Int64
	rw := b.start(t, worker.Config{Name: "w-result", MaxResultBytes: 1000}, map[string]worker.HandlerFunc{
		taskType: func(_ context.Context, t worker.Task) (any, error) {
			runs.Add(1)
			return strings.Repeat("y", 2000), nil
		},
	})
	b.publishTask(t, taskType, "job-res", 1, `{}`, retries(3))

	ev := rw.expect(t, worker.EventDeadLettered)[0]
	require.Equal(t, protocol.ReasonResultTooLarge, ev.Reason)
	d := b.get(t, b.names.DeadQueue)
	requireDeadLetter(t, d, protocol.ReasonResultTooLarge, "the result is 2002 bytes of JSON, over this worker's limit of 1000", "w-result")
	require.NoError(t, rw.stop())
	require.EqualValues(t, 1, runs.Load(), "not retried")
	require.Zero(t, b.depth(t, b.names.ResultsQueue))
}

// The results of a task batch are cut into result batches that each fit
// in MaxMessageBytes, and together hold every completed task once.
func TestRunCutsResultBatchesToMaxMessageBytes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const limit = 64 << 10
	rw := b.startWith(t, worker.Config{Name: "w-cut", MaxMessageBytes: limit, MaxResultBytes: 20 << 10}, nil, func(w *worker.Worker) {
		w.Handle("bulk", func(_ context.Context, t worker.Task) (any, error) {
			return strings.Repeat("z", 15<<10), nil
		})
	})
	const n = 10 // 150 KiB of results: three messages at least
	tasks := make([]protocol.BatchTask, n)
	for i := range tasks {
		tasks[i] = protocol.BatchTask{TaskID: int64(i + 1), Payload: json.RawMessage(`{}`)}
	}
	body, err := protocol.EncodeBatch(protocol.Batch{JobID: "job-cut", Tasks: tasks})
	require.NoError(t, err)
	b.publish(t, amqp.Publishing{
		ContentType: protocol.ContentType, DeliveryMode: amqp.Persistent, Type: "bulk",
		MessageId: protocol.BatchMessageID("job-cut", 1, n), CorrelationId: "job-cut", Body: body,
	})
	rw.expect(t, repeat(worker.EventCompleted, n)...)
	require.NoError(t, rw.stop())

	seen := map[int64]int{}
	messages := 0
	for b.depth(t, b.names.ResultsQueue) > 0 {
		d := b.get(t, b.names.ResultsQueue)
		messages++
		require.LessOrEqual(t, len(d.Body), limit)
		rs, err := protocol.DecodeResults(d.Body)
		require.NoError(t, err)
		for _, r := range rs {
			seen[r.TaskID]++
		}
	}
	require.GreaterOrEqual(t, messages, 3)
	require.Len(t, seen, n)
	for id, k := range seen {
		require.Equal(t, 1, k, "task %d", id)
	}
}
