package worker_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/worker"
)

// withTimeout is headers with x-task-timeout set to timeout.
func withTimeout(headers amqp.Table, timeout time.Duration) amqp.Table {
	headers[protocol.HeaderTaskTimeout] = timeout.Milliseconds()
	return headers
}

// A run past x-task-timeout is a transient failure that names the
// timeout, whether the handler heeds its context (it returns at the
// deadline) or ignores it (it runs to its end and returns a result): the
// task is retried, with the header kept, so the retry has the same limit,
// then dead-lettered once its retries are spent.
func TestRunATaskPastItsTimeoutIsRetriedThenDeadLettered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const limit = 100 * time.Millisecond
	var (
		mu     sync.Mutex
		limits = map[int64][]time.Duration{} // deadline - start, per run; 0 without a deadline
	)
	seen := func(ctx context.Context, tk worker.Task, start time.Time) {
		mu.Lock()
		defer mu.Unlock()
		var limit time.Duration
		if d, ok := ctx.Deadline(); ok {
			limit = d.Sub(start)
		}
		limits[tk.TaskID] = append(limits[tk.TaskID], limit)
	}
	rw := b.start(t, worker.Config{Name: "w-timeout"}, map[string]worker.HandlerFunc{
		"heeds": func(ctx context.Context, tk worker.Task) (any, error) {
			seen(ctx, tk, time.Now())
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(waitTimeout):
				return "no deadline came", nil
			}
		},
		"ignores": func(ctx context.Context, tk worker.Task) (any, error) {
			seen(ctx, tk, time.Now())
			time.Sleep(3 * limit)
			return "too late", nil
		},
	})
	b.publishTask(t, "heeds", "job-t", 1, `1`, withTimeout(retries(1), limit))
	b.publishTask(t, "ignores", "job-t", 2, `2`, withTimeout(retries(1), limit))

	byTask := map[int64][]worker.Event{}
	for range 4 {
		ev := recv(t, rw.events, "event")
		byTask[ev.TaskID] = append(byTask[ev.TaskID], ev)
	}
	for id := int64(1); id <= 2; id++ {
		evs := byTask[id]
		require.Len(t, evs, 2, "task %d", id)
		require.Equal(t, worker.EventRetried, evs[0].Kind, "task %d: %+v", id, evs[0])
		require.EqualError(t, evs[0].Err, "worker: task timeout of 100ms exceeded")
		require.ErrorIs(t, evs[0].Err, context.DeadlineExceeded)
		require.Equal(t, fastTiers[0], evs[0].Delay)
		require.Equal(t, worker.EventDeadLettered, evs[1].Kind, "task %d: %+v", id, evs[1])
		require.Equal(t, protocol.ReasonTimeout, evs[1].Reason)
		require.Equal(t, 2, evs[1].Attempt)
		require.EqualError(t, evs[1].Err, "worker: task timeout of 100ms exceeded")
		mu.Lock()
		require.Len(t, limits[id], 2, "task %d: two runs", id)
		for run, l := range limits[id] {
			require.InDelta(t, limit, l, float64(50*time.Millisecond), "task %d, run %d: deadline - start", id, run+1)
		}
		mu.Unlock()
	}
	require.NoError(t, rw.stop())
	for range 2 {
		d := b.get(t, b.names.TasksDLQ)
		requireDeadLetter(t, d, protocol.ReasonTimeout, "worker: task timeout of 100ms exceeded", "w-timeout")
		require.EqualValues(t, 100, d.Headers[protocol.HeaderTaskTimeout], "the dead letter keeps the limit")
	}
	require.Zero(t, b.depth(t, b.names.ResultsQueue), "no result of a run past its deadline")
	require.Zero(t, b.depth(t, b.names.TasksQueue))
}

// A task message without x-task-timeout (an older relay, another
// producer) runs without a deadline.
func TestRunATaskWithoutATimeoutHasNoDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	type call struct {
		deadline bool
		timeout  time.Duration
	}
	calls := make(chan call, 1)
	rw := b.start(t, worker.Config{}, map[string]worker.HandlerFunc{
		taskType: func(ctx context.Context, tk worker.Task) (any, error) {
			_, ok := ctx.Deadline()
			calls <- call{ok, tk.Timeout}
			return square(ctx, tk)
		},
	})
	b.publishTask(t, taskType, "job-u", 1, `{"x": 3}`, retries(1))
	rw.expect(t, worker.EventCompleted)
	require.Equal(t, call{false, 0}, recv(t, calls, "handler call"), "no header: no Timeout, no deadline")
}

// A batch handler's one call has one deadline, the batch's x-task-timeout
// from the call's start, not that limit per task; a call past it fails
// every task of the batch.
func TestRunABatchCallHasOneDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const limit = 100 * time.Millisecond
	limits := make(chan time.Duration, 10)
	rw := b.startWith(t, worker.Config{Name: "w-batch"}, nil, func(w *worker.Worker) {
		w.HandleBatch("bulk", func(ctx context.Context, ts []worker.Task) []worker.Outcome {
			start := time.Now()
			if d, ok := ctx.Deadline(); ok {
				limits <- d.Sub(start)
				<-ctx.Done()
			} else {
				limits <- 0
			}
			return make([]worker.Outcome, len(ts))
		})
	})
	body, err := protocol.EncodeBatch(protocol.Batch{JobID: "job-b", Tasks: []protocol.BatchTask{
		{TaskID: 1, Payload: json.RawMessage(`1`)}, {TaskID: 2, Payload: json.RawMessage(`2`)}, {TaskID: 3, Payload: json.RawMessage(`3`)}}})
	require.NoError(t, err)
	b.publish(t, amqp.Publishing{ContentType: protocol.ContentType, DeliveryMode: amqp.Persistent, Type: "bulk",
		MessageId: protocol.BatchMessageID("job-b", 1, 3), CorrelationId: "job-b",
		Headers: withTimeout(retries(0), limit), Body: body})

	for _, ev := range rw.expect(t, worker.EventDeadLettered, worker.EventDeadLettered, worker.EventDeadLettered) {
		require.Equal(t, protocol.ReasonTimeout, ev.Reason)
		require.EqualError(t, ev.Err, "worker: task timeout of 100ms exceeded")
	}
	require.InDelta(t, limit, recv(t, limits, "batch call"), float64(50*time.Millisecond), "one limit for the call, not one per task")
	require.Empty(t, limits, "one call for the batch")
}
