package warren_test

// End to end: the worker holds a handler to its job's task_timeout.

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/deadletters"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/worker"
)

// A handler that runs past its job's task_timeout is cut off at the
// deadline its context carries: the run is a transient failure whose
// error names the timeout, retried through the tiers, then dead-lettered
// and recorded as failed. Its job-mates are not affected.
func TestAHandlerPastTheTaskTimeoutIsRetriedThenDeadLettered(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		b := setupFailures(t, kind)
		b.startServer(t, b.store)
		// 1s is the shortest task_timeout a job may have.
		job := b.submitTyped(t, "slow", 3, warren.Policy{TaskTimeout: time.Second, MaxRetries: 1,
			ToleratedFailures: 1, ToleratedFailurePercent: 50})

		type run struct {
			started, deadline time.Time
			hasDeadline       bool
		}
		runs := make(chan run, 10)
		var slowRuns atomic.Int64
		w, err := worker.New(b.workerConfig(4))
		require.NoError(t, err)
		w.Handle("slow", func(ctx context.Context, tk worker.Task) (any, error) {
			if tk.TaskID != 2 {
				return 2 * tk.TaskID, nil
			}
			slowRuns.Add(1)
			r := run{started: time.Now()}
			r.deadline, r.hasDeadline = ctx.Deadline()
			runs <- r
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(5 * time.Second):
				return "too late", nil
			}
		})
		runWorker(t, w)

		require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID), "one failure of 3 is tolerated")
		for i := range 2 {
			var r run
			select {
			case r = <-runs:
			case <-time.After(waitTimeout):
				t.Fatalf("task 2 ran %d times, want 2", i)
			}
			require.True(t, r.hasDeadline, "run %d: the handler's context has the job's task_timeout as deadline", i+1)
			require.InDelta(t, time.Second, r.deadline.Sub(r.started), float64(100*time.Millisecond), "run %d", i+1)
		}
		require.Equal(t, int64(2), slowRuns.Load(), "1 run + 1 retry")

		ctx := context.Background()
		tasks := allTasks(t, b.store, job.ID)
		require.Equal(t, warren.TaskFailed, tasks[1].State, "task 2 overran its task_timeout on every run")
		require.Equal(t, 2, tasks[1].Attempts)
		require.Contains(t, tasks[1].Error, protocol.ReasonTimeout)
		require.Contains(t, tasks[1].Error, "task timeout of 1s exceeded")
		raw, err := b.store.JobResult(ctx, job.ID)
		require.NoError(t, err)
		require.JSONEq(t, `[2,null,6]`, string(raw))

		parked, err := b.dlq(t).List(ctx, deadletters.Filter{JobID: job.ID})
		require.NoError(t, err)
		require.Len(t, parked, 1)
		require.Equal(t, int64(2), parked[0].TaskID)
		require.Contains(t, parked[0].Error, "task timeout of 1s exceeded")
	})
}
