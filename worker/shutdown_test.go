package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/worker"
)

// Cancelling Run's context lets the running handler finish and publish
// its result, returns the tasks it had received but not started, and
// returns nil.
func TestRunShutdownFinishesRunningTasksAndRequeuesTheRest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := int64(1); i <= 3; i++ {
		b.publishTask(t, taskType, "job-s", i, `{"x": 2}`, nil)
	}
	started := make(chan int64, 10)
	release := make(chan struct{})
	first := b.start(t, worker.Config{Name: "first", Concurrency: 1, Prefetch: 3}, map[string]worker.HandlerFunc{
		taskType: func(ctx context.Context, task worker.Task) (any, error) {
			started <- task.TaskID
			select {
			case <-release:
			case <-ctx.Done(): // only after ShutdownTimeout, 30 s
				return nil, ctx.Err()
			}
			return square(ctx, task)
		},
	})
	running := recv(t, started, "first handler")

	stopped := make(chan error, 1)
	go func() { stopped <- first.stop() }()
	// Wait until Run has stopped taking tasks before letting the handler
	// finish, or its slot would go to the next task.
	var requeued []int64
	for ev := recv(t, first.events, "draining"); ev.Kind != worker.EventDraining; ev = recv(t, first.events, "draining") {
		require.Equal(t, worker.EventRequeued, ev.Kind)
		requeued = append(requeued, ev.TaskID)
	}
	close(release)
	require.NoError(t, recv(t, stopped, "Run's return"))
	require.Equal(t, running, first.expect(t, worker.EventCompleted)[0].TaskID)
	require.Empty(t, started, "a task started after shutdown began")
	require.NotContains(t, requeued, running)

	r, _ := b.result(t)
	require.Equal(t, running, r.TaskID)
	require.JSONEq(t, `{"square": 4}`, string(r.Result))

	// The other two are back in the queue, on their first attempt.
	second := b.start(t, worker.Config{Name: "second"}, map[string]worker.HandlerFunc{taskType: square})
	evs := second.expect(t, worker.EventCompleted, worker.EventCompleted)
	rest := []int64{evs[0].TaskID, evs[1].TaskID}
	require.ElementsMatch(t, without([]int64{1, 2, 3}, running), rest)
	for _, ev := range evs {
		require.Equal(t, 1, ev.Attempt)
	}
}

// A handler still running when ShutdownTimeout runs out has its context
// cancelled and its task returned to the queue, not retried or failed.
func TestRunShutdownTimeoutRequeuesUnfinishedTasks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.publishTask(t, taskType, "job-t", 1, `{"x": 3}`, retries(0))
	started := make(chan struct{}, 1)
	first := b.start(t, worker.Config{ShutdownTimeout: 100 * time.Millisecond}, map[string]worker.HandlerFunc{
		taskType: func(ctx context.Context, _ worker.Task) (any, error) {
			started <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		},
	})
	recv(t, started, "handler")
	require.NoError(t, first.stop())
	evs := first.expect(t, worker.EventDraining, worker.EventRequeued)
	require.Equal(t, worker.Event{Kind: worker.EventRequeued, JobID: "job-t", TaskID: 1, Type: taskType, Attempt: 1}, evs[1])

	second := b.start(t, worker.Config{}, map[string]worker.HandlerFunc{taskType: square})
	ev := second.expect(t, worker.EventCompleted)[0]
	require.Equal(t, 1, ev.Attempt, "a requeue is not a retry")
	r, _ := b.result(t)
	require.Equal(t, protocol.StatusCompleted, r.Status)
	require.JSONEq(t, `{"square": 9}`, string(r.Result))
}

func without(s []int64, v int64) []int64 {
	var out []int64
	for _, x := range s {
		if x != v {
			out = append(out, x)
		}
	}
	return out
}
