package warren_test

// End-to-end tests of generations (docs/protocol.md, x-generation): an
// outcome of an earlier copy of a task never changes its current run.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/deadletters"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/worker"
)

// The reconciler fails a task as lost while its message is still queued,
// the job is redriven, and then the old copy runs first and fails for
// good. Its dead letter must not fail the new run: the new copy's result
// completes the job.
func TestTheOldCopyOfARedrivenTaskDoesNotFailTheNewRun(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		b := setupFailures(t, kind)
		b.startServer(t, b.store)
		ctx := context.Background()
		job := b.submit(t, 1, warren.Policy{MaxRetries: 0})
		b.waitFor(t, func() bool { return b.published.Load() == 1 }, "the task is published")

		// No worker yet, so the message waits in the work queue; the
		// reconciler, two hours on, finds no result and fails it as lost.
		rep, err := b.store.ReconcileStale(ctx, store.Staleness{Now: time.Now().Add(2 * time.Hour)}, 100)
		require.NoError(t, err)
		require.Equal(t, 1, rep.Failed)
		require.Equal(t, warren.JobFailed, b.waitClosed(t, job.ID), "the scan closes it")

		_, n, err := b.store.RedriveJob(ctx, job.ID)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		b.wakeRelays()
		b.waitFor(t, func() bool { return b.published.Load() == 2 }, "the redriven task is published")

		// The old copy (its first run) is first in the queue and fails for
		// good; the new one (the lost run counted) succeeds.
		w, err := worker.New(b.workerConfig(1))
		require.NoError(t, err)
		w.Handle("double", func(_ context.Context, tk worker.Task) (any, error) {
			if tk.Attempt == 1 {
				return nil, worker.Permanent(errors.New("the old copy's input is gone"))
			}
			return 2 * tk.TaskID, nil
		})
		runWorker(t, w)

		require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID), "the old copy's dead letter did not fail the new run")
		b.expectDoubled(t, job.ID, 1)
		require.GreaterOrEqual(t, b.duplicates.Load(), int64(1), "the old copy's dead letter counts as a duplicate")
		tasks := allTasks(t, b.store, job.ID)
		require.Equal(t, 2, tasks[0].Attempts, "the lost run counted, then the new run")
		require.Empty(t, tasks[0].Error)

		dead, err := b.dlq(t).List(ctx, deadletters.Filter{JobID: job.ID})
		require.NoError(t, err)
		require.Len(t, dead, 1, "the old copy's dead letter is kept for people")
		require.Equal(t, protocol.ReasonPermanent, dead[0].Reason)
	})
}
