package warren_test

// End-to-end tests of the reconciler (docs/failures.md): it republishes
// tasks whose messages are lost, and only those.

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/worker"
)

// A backlog is not a loss: 2,000 tasks of 20 ms on one worker of
// concurrency 1 wait up to 40 s in the work queue, eight times their
// task_timeout of 5 s, and the reconciler, looking every second with a
// grace of only 1 s, leaves every one of them alone.
func TestQueueWaitIsNotLost(t *testing.T) {
	t.Parallel()
	const n, taskTime, timeout = 2000, 20 * time.Millisecond, 5 * time.Second
	b := setupFailures(t, "sqlite")
	b.reconcileInterval, b.reconcileGrace = time.Second, time.Second
	b.startServer(t, b.store)
	job := b.submit(t, n, warren.Policy{MaxRetries: 2, TaskTimeout: timeout})

	w, err := worker.New(b.workerConfig(1))
	require.NoError(t, err)
	w.Handle("double", func(ctx context.Context, tk worker.Task) (any, error) {
		var p struct{ N int }
		if err := json.Unmarshal(tk.Payload, &p); err != nil {
			return nil, worker.Permanent(err)
		}
		select {
		case <-time.After(taskTime):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return 2 * p.N, nil
	})
	start := time.Now()
	runWorker(t, w)

	require.Equal(t, warren.JobCompleted, b.waitClosedWithin(t, job.ID, 4*time.Minute))
	elapsed := time.Since(start)
	require.Greater(t, elapsed, n*taskTime, "the backlog took its time")
	b.expectDoubled(t, job.ID, n)
	require.GreaterOrEqual(t, b.passes.Load(), int64(elapsed/time.Second)-5, "the reconciler looked all along")
	require.Zero(t, b.requeued.Load(), "the reconciler republished no task")
	require.Zero(t, b.lost.Load(), "the reconciler failed no task as lost")
	require.Zero(t, b.duplicates.Load(), "no copy ran twice")
	for _, tk := range allTasks(t, b.store, job.ID) {
		require.Equal(t, 1, tk.Attempts, "task %d ran once", tk.TaskID)
	}
}

// A lost message is still found: while the task messages wait in the work
// queue (no worker runs), nothing is republished however long they wait;
// once they are deleted by hand and the queues are empty, the reconciler
// republishes the tasks after their task_timeout, and the new copies run.
func TestLostMessagesAreRepublishedOnceNothingWaits(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		const n, timeout = 3, time.Second
		b := setupFailures(t, kind)
		b.reconcileInterval, b.reconcileGrace = 100*time.Millisecond, 200*time.Millisecond
		b.startServer(t, b.store)
		job := b.submit(t, n, warren.Policy{MaxRetries: 1, TaskTimeout: timeout})
		b.waitFor(t, func() bool { return b.published.Load() == n }, "the tasks are published")

		passes := b.passes.Load()
		b.waitFor(t, func() bool { return b.passes.Load() >= passes+40 }, "40 reconciler passes")
		require.Zero(t, b.requeued.Load()+b.lost.Load(), "4 s in the queue, 4 times the task timeout: nothing is lost")

		ch, err := b.admin.Channel()
		require.NoError(t, err)
		defer ch.Close()
		purged, err := ch.QueuePurge(b.names.TasksQueue, false)
		require.NoError(t, err)
		require.Equal(t, n, purged, "the messages are lost")
		b.waitFor(t, func() bool { return b.requeued.Load() == n }, "the reconciler republishes the lost tasks")
		b.waitFor(t, func() bool { return b.published.Load() == 2*n }, "the relay publishes them again")

		runWorker(t, newDoublingWorker(t, b, nil))
		require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID))
		b.expectDoubled(t, job.ID, n)
		require.Zero(t, b.lost.Load())
		for _, tk := range allTasks(t, b.store, job.ID) {
			require.Equal(t, 2, tk.Attempts, "task %d: the lost run counted, then the new one", tk.TaskID)
		}
	})
}

// A retry waiting in its tier is a sign of life too: a task that failed
// once waits 4 s in the retry tier, four times its task_timeout, and is
// not republished; its retry completes it.
func TestARetryWaitingInItsTierIsNotLost(t *testing.T) {
	t.Parallel()
	b := setupWith(t, "sqlite", &broker.TopologyOptions{RetryTiers: []time.Duration{4 * time.Second}, DeliveryLimit: testDeliveryLimit})
	b.reconcileInterval, b.reconcileGrace = 100*time.Millisecond, 200*time.Millisecond
	b.startServer(t, b.store)
	job := b.submit(t, 1, warren.Policy{MaxRetries: 1, TaskTimeout: time.Second})
	var runs atomic.Int64
	w, err := worker.New(b.workerConfig(1))
	require.NoError(t, err)
	w.Handle("double", func(_ context.Context, tk worker.Task) (any, error) {
		if runs.Add(1) == 1 {
			return nil, errors.New("transient: try again")
		}
		return 2 * tk.TaskID, nil
	})
	runWorker(t, w)

	require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID))
	b.expectDoubled(t, job.ID, 1)
	require.Zero(t, b.requeued.Load()+b.lost.Load(), "the reconciler left the waiting retry alone")
	require.Equal(t, int64(2), runs.Load(), "the first run and its retry")
	require.Equal(t, 2, allTasks(t, b.store, job.ID)[0].Attempts)
}
