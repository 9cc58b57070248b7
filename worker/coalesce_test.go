package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/worker"
)

// publishTasks publishes single task messages of job, tasks first..last,
// each with payload {"x": its id} and generation gen (none when 0),
// within the confirm window, and waits for their confirms.
func (b *testBundle) publishTasks(t *testing.T, job string, first, last int64, gen int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var confs []*broker.Confirmation
	for id := first; id <= last; id++ {
		body, err := protocol.EncodeTask(protocol.Task{JobID: job, TaskID: id, Payload: json.RawMessage(fmt.Sprintf(`{"x": %d}`, id))})
		require.NoError(t, err)
		headers := retries(3)
		if gen > 0 {
			headers[protocol.HeaderGeneration] = int64(gen)
		}
		c, err := b.pub.Publish(ctx, b.names.JobsExchange, protocol.RoutingKeyTask, amqp.Publishing{
			ContentType: protocol.ContentType, DeliveryMode: amqp.Persistent, Type: taskType,
			MessageId: protocol.MessageID(job, id), CorrelationId: job, Headers: headers, Body: body,
		})
		require.NoError(t, err)
		confs = append(confs, c)
	}
	for _, c := range confs {
		require.NoError(t, c.Wait(ctx))
	}
}

// The results of single task messages that finish together go in result
// batches, one job and one generation each (the batch carries it), with
// increasing task ids; every task completes once, with one result.
func TestRunCoalescesTheResultsOfSingleTaskMessages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 500
	b.publishTasks(t, "job-a", 1, 200, 1)
	b.publishTasks(t, "job-a", 201, 400, 2)
	b.publishTasks(t, "job-b", 1, 100, 0)
	generation := func(job string, id int64) any {
		switch {
		case job == "job-b":
			return nil
		case id <= 200:
			return int64(1)
		default:
			return int64(2)
		}
	}
	var messages atomic.Int64
	rw := b.startWith(t, worker.Config{Concurrency: 16}, map[string]worker.HandlerFunc{taskType: square}, func(w *worker.Worker) {
		worker.OnResults(w, func(int, error) { messages.Add(1) })
	})
	completed := map[string]int{}
	for range n {
		ev := recv(t, rw.events, "completed event")
		require.Equal(t, worker.EventCompleted, ev.Kind, "%+v", ev)
		completed[protocol.MessageID(ev.JobID, ev.TaskID)]++
	}
	require.NoError(t, rw.stop())
	require.Len(t, completed, n)

	results := map[string]int{}
	sent := 0
	for b.depth(t, b.names.ResultsQueue) > 0 {
		d := b.get(t, b.names.ResultsQueue)
		sent++
		rs, err := protocol.DecodeResults(d.Body)
		require.NoError(t, err)
		first := rs[0]
		if len(rs) > 1 {
			require.Equal(t, protocol.BatchMessageID(first.JobID, first.TaskID, len(rs)), d.MessageId)
		} else {
			require.Equal(t, protocol.MessageID(first.JobID, first.TaskID), d.MessageId)
		}
		require.Equal(t, first.JobID, d.CorrelationId)
		for i, r := range rs {
			require.Equal(t, first.JobID, r.JobID)
			if i > 0 {
				require.Greater(t, r.TaskID, rs[i-1].TaskID, "task ids increase in %s", d.MessageId)
			}
			require.Equal(t, generation(r.JobID, r.TaskID), d.Headers[protocol.HeaderGeneration], "the generation of %s:%d", r.JobID, r.TaskID)
			require.JSONEq(t, fmt.Sprintf(`{"square": %d}`, r.TaskID*r.TaskID), string(r.Result))
			results[protocol.MessageID(r.JobID, r.TaskID)]++
		}
	}
	require.Equal(t, completed, results, "one result per task")
	require.EqualValues(t, sent, messages.Load())
	require.Less(t, sent, n, "results were coalesced")
	t.Logf("%d results in %d messages", n, sent)
	require.Zero(t, b.depth(t, b.names.TasksQueue))
}

// A task that runs long does not hold back the acks of the tasks
// delivered after it: with a prefetch of 4, many more than 4 tasks
// complete while it runs, which they could not if their acks waited for
// its own (a multiple-ack covering it).
func TestRunAcksFastTasksPastASlowOne(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const fast = 40
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	rw := b.start(t, worker.Config{Concurrency: 4, Prefetch: 4}, map[string]worker.HandlerFunc{
		taskType: func(ctx context.Context, task worker.Task) (any, error) {
			if task.TaskID == 1 {
				started <- struct{}{}
				<-release
			}
			return square(ctx, task)
		},
	})
	b.publishTasks(t, "job-slow", 1, 1, 0)
	recv(t, started, "the slow task")
	b.publishTasks(t, "job-slow", 2, fast+1, 0)
	done := map[int64]bool{}
	for range fast {
		ev := recv(t, rw.events, "completed event")
		require.Equal(t, worker.EventCompleted, ev.Kind, "%+v", ev)
		done[ev.TaskID] = true
	}
	require.NotContains(t, done, int64(1), "the slow task is still running")
	close(release)
	require.EqualValues(t, 1, rw.expect(t, worker.EventCompleted)[0].TaskID)
	require.NoError(t, rw.stop())
	require.Len(t, b.results(t), fast+1)
	require.Zero(t, b.depth(t, b.names.TasksQueue))
}

// A graceful stop leaves nothing unacked: after Run returns, the work
// queue is empty and no completed task is delivered again.
func TestRunShutdownFlushesAcks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 200
	b.publishTasks(t, "job-f", 1, n, 0)
	first := b.start(t, worker.Config{Concurrency: 8}, map[string]worker.HandlerFunc{taskType: square})
	first.expect(t, repeat(worker.EventCompleted, n)...)
	require.NoError(t, first.stop())
	require.Zero(t, b.depth(t, b.names.TasksQueue), "a completed task went back to the queue")

	var (
		mu  sync.Mutex
		ran []int64
	)
	second := b.start(t, worker.Config{}, map[string]worker.HandlerFunc{
		taskType: func(ctx context.Context, task worker.Task) (any, error) {
			mu.Lock()
			ran = append(ran, task.TaskID)
			mu.Unlock()
			return square(ctx, task)
		},
	})
	b.publishTasks(t, "job-f", n+1, n+1, 0)
	require.EqualValues(t, n+1, second.expect(t, worker.EventCompleted)[0].TaskID)
	require.NoError(t, second.stop())
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int64{n + 1}, ran, "only the new task ran")
}

// A result batch the broker does not confirm (returned: its route is
// gone) sends every delivery it answers back to the queue
// (EventPublishFailed each); once the route is back, every task completes,
// with one result.
func TestRunRequeuesEveryTaskOfAnUnconfirmedResultBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	type unit struct {
		tasks int
		err   error
	}
	units := make(chan unit, 10000)
	rw := b.startWith(t, worker.Config{Concurrency: 8}, map[string]worker.HandlerFunc{taskType: square}, func(w *worker.Worker) {
		worker.OnResults(w, func(tasks int, err error) { units <- unit{tasks, err} })
	})
	// Run binds the results queue: unbind it only once a first task
	// shows it is consuming.
	b.publishTasks(t, "job-u", 1, 1, 0)
	rw.expect(t, worker.EventCompleted)
	require.NoError(t, recv(t, units, "warm-up result").err)
	ch, err := b.admin.Channel()
	require.NoError(t, err)
	defer func() { _ = ch.Close() }()
	require.NoError(t, ch.QueueUnbind(b.names.ResultsQueue, protocol.RoutingKeyResult, b.names.ResultsExchange, nil))

	const n = 40
	b.publishTasks(t, "job-u", 2, n+1, 0)
	failedTasks := 0
	for batch := false; !batch; {
		u := recv(t, units, "a result batch that fails")
		require.ErrorIs(t, u.err, broker.ErrUnroutable)
		failedTasks += u.tasks
		batch = u.tasks > 1
	}
	require.NoError(t, ch.QueueBind(b.names.ResultsQueue, protocol.RoutingKeyResult, b.names.ResultsExchange, false, nil))

	failedEvents := 0
	completed := map[int64]int{}
	for len(completed) < n {
		ev := recv(t, rw.events, "task event")
		switch ev.Kind {
		case worker.EventPublishFailed:
			failedEvents++
		case worker.EventCompleted:
			completed[ev.TaskID]++
		default:
			t.Fatalf("unexpected event %+v", ev)
		}
	}
	require.NoError(t, rw.stop())
	for more := true; more; {
		select {
		case u := <-units:
			if u.err != nil {
				failedTasks += u.tasks
			}
		default:
			more = false
		}
	}
	for more := true; more; {
		select {
		case ev := <-rw.events:
			if ev.Kind == worker.EventDraining {
				continue
			}
			require.Equal(t, worker.EventPublishFailed, ev.Kind, "%+v", ev)
			failedEvents++
		default:
			more = false
		}
	}
	require.Equal(t, failedTasks, failedEvents, "every task of a failed result message went back to the queue")
	for id, k := range completed {
		require.Equal(t, 1, k, "task %d", id)
	}
	results := map[int64]int{}
	for _, r := range b.results(t) {
		results[r.TaskID]++
	}
	require.Len(t, results, n+1, "the warm-up task and the n others")
	for id, k := range results {
		require.Equal(t, 1, k, "task %d", id)
	}
	require.Zero(t, b.depth(t, b.names.TasksQueue))
}
