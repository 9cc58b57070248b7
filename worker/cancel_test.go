package worker_test

import (
	"context"
	"sync"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/worker"
)

func (b *testBundle) cancel(t *testing.T, jobID string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	require.NoError(t, broker.PublishCancel(ctx, b.pub, b.names, jobID))
}

// A cancel broadcast makes the worker ack the job's tasks without running
// them or publishing anything, while other jobs' tasks still run.
func TestRunSkipsTasksOfCancelledJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	ran := map[string]int{}
	rw := b.start(t, worker.Config{}, map[string]worker.HandlerFunc{
		taskType: func(ctx context.Context, task worker.Task) (any, error) {
			mu.Lock()
			ran[task.JobID]++
			mu.Unlock()
			return square(ctx, task)
		},
	})
	rw.listening(t)
	b.cancel(t, "job-x")
	require.Equal(t, "job-x", rw.expect(t, worker.EventCancelSeen)[0].JobID)

	for i := int64(1); i <= 3; i++ {
		b.publishTask(t, taskType, "job-x", i, `{"x": 1}`, retries(3))
		b.publishTask(t, taskType, "job-y", i, `{"x": 2}`, retries(3))
	}
	got := map[string][]worker.EventKind{}
	for range 6 {
		ev := recv(t, rw.events, "task event")
		got[ev.JobID] = append(got[ev.JobID], ev.Kind)
	}
	require.Equal(t, map[string][]worker.EventKind{
		"job-x": repeat(worker.EventSkipped, 3),
		"job-y": repeat(worker.EventCompleted, 3),
	}, got)
	mu.Lock()
	require.Equal(t, map[string]int{"job-y": 3}, ran, "no handler runs for a cancelled job")
	mu.Unlock()

	require.NoError(t, rw.stop())
	rs := b.results(t)
	require.Len(t, rs, 3, "results of job-y only")
	for _, r := range rs {
		require.Equal(t, "job-y", r.JobID)
	}
	require.Zero(t, b.depth(t, b.names.TasksQueue), "skipped tasks are acked")
	require.Zero(t, b.depth(t, b.names.TasksDLQ))
}

// A task already running when its job is cancelled finishes normally;
// the aggregator ignores its result.
func TestRunLetsARunningTaskOfACancelledJobFinish(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	rw := b.start(t, worker.Config{}, map[string]worker.HandlerFunc{
		taskType: func(ctx context.Context, task worker.Task) (any, error) {
			started <- struct{}{}
			<-release
			return square(ctx, task)
		},
	})
	rw.listening(t)
	b.publishTask(t, taskType, "job-x", 1, `{"x": 3}`, nil)
	recv(t, started, "handler")
	b.cancel(t, "job-x")
	rw.expect(t, worker.EventCancelSeen)
	close(release)
	rw.expect(t, worker.EventCompleted)
	r, _ := b.result(t)
	require.Equal(t, "job-x", r.JobID)
}

// Control messages that cannot be understood are logged and dropped; the
// worker keeps listening and working.
func TestRunIgnoresMalformedControlMessages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rw := b.start(t, worker.Config{}, map[string]worker.HandlerFunc{taskType: square})
	rw.listening(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for i, body := range []string{`not json`, `{"type": "cancel"}`, `[1]`, `{"type": "snooze", "job_id": "job-z"}`, `{"type": "pause", "job_id": "job-z", "queue": "q"}`, `{"type": "cancel", "queue": "q"}`} {
		require.NoError(t, b.pub.PublishAndWait(ctx, b.names.ControlExchange, "", amqp.Publishing{
			MessageId: "bad-" + string(rune('0'+i)), Body: []byte(body),
		}))
	}
	// The queue is FIFO: once this cancel is seen, the others were handled.
	b.cancel(t, "job-z")
	require.Equal(t, worker.Event{Kind: worker.EventCancelSeen, JobID: "job-z"}, rw.expect(t, worker.EventCancelSeen)[0])

	b.publishTask(t, taskType, "job-w", 1, `{"x": 5}`, nil)
	rw.expect(t, worker.EventCompleted)
	require.NoError(t, rw.stop(), "Run kept running")
}

// Losing the control consumer makes the worker reconnect rather than
// run cancelled jobs' tasks unawares; the jobs cancelled before the loss
// stay cancelled.
func TestRunResubscribesWhenTheControlConsumerIsLost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rw := b.start(t, worker.Config{}, map[string]worker.HandlerFunc{taskType: square})
	c := rw.listening(t)
	b.cancel(t, "job-x")
	rw.expect(t, worker.EventCancelSeen)

	require.NoError(t, c.ch.Close())
	rw.expect(t, worker.EventConnectionLost, worker.EventReconnected)
	again := rw.listening(t)
	require.NotEqual(t, c.queue, again.queue, "a fresh control queue")

	b.publishTask(t, taskType, "job-x", 1, `{"x": 1}`, nil)
	require.Equal(t, worker.EventSkipped, recv(t, rw.events, "skip").Kind, "the cancel outlived the reconnect")
	b.cancel(t, "job-y")
	require.Equal(t, "job-y", rw.expect(t, worker.EventCancelSeen)[0].JobID, "cancels are heard again")
	require.NoError(t, rw.stop())
}

// A cancel with no worker running is not an error.
func TestPublishCancelWithNoWorkerRunning(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cancel(t, "job-nobody")
}
