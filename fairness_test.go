package warren_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/worker"
)

// newSleepingWorker is a worker of concurrency 8 whose "sleep" tasks take
// d each.
func newSleepingWorker(t *testing.T, b *testBundle, d time.Duration) *worker.Worker {
	t.Helper()
	w, err := worker.New(b.workerConfig(8))
	require.NoError(t, err)
	w.Handle("sleep", func(ctx context.Context, _ worker.Task) (any, error) {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return 1, nil
	})
	return w
}

// A small job submitted while a big one runs does not wait behind the big
// one's backlog: the relay keeps only a window of messages in the work
// queue and shares it between the open jobs. Without the window the small
// job's tasks would queue behind every task of the big one.
func TestASmallJobDoesNotWaitBehindABigOne(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")
	const window = 100
	b.relayWindow = window
	b.startServer(t, b.store)
	// Tasks of 10 ms go one per message with automatic batching, so a
	// window of messages is a window of tasks, in which this test counts
	// the small job's wait.
	runWorker(t, newSleepingWorker(t, b, 10*time.Millisecond))
	runWorker(t, newSleepingWorker(t, b, 10*time.Millisecond))

	big := b.submitTyped(t, "sleep", 6000, warren.Policy{})
	b.waitFor(t, func() bool { return b.applied.Load() >= 300 }, "the big job's first results")
	maxReady := 0
	ready := func() {
		n := amqptest.QueueDepth(t, b.admin, b.names.TasksQueue)
		maxReady = max(maxReady, n)
	}
	ready()
	before, err := b.store.GetJob(context.Background(), big.ID)
	require.NoError(t, err)
	submitted := time.Now()
	small := b.submitTyped(t, "sleep", 5, warren.Policy{})
	for {
		closed := <-b.closed
		ready()
		if closed.id == small.ID {
			break
		}
		require.NotEqual(t, big.ID, closed.id, "the big job closed first: the small one waited behind it")
	}
	took := time.Since(submitted)
	got, err := b.store.GetJob(context.Background(), big.ID)
	require.NoError(t, err)
	require.False(t, got.State.Terminal(), "the big job is still running")
	t.Logf("the 5-task job closed %v after its submission; the big job had %d of 6000 tasks done (%d when it was submitted); at most %d messages ready",
		took, got.CompletedTasks, before.CompletedTasks, maxReady)
	// Measured in the big job's progress rather than in seconds, which a
	// loaded machine stretches: behind the whole backlog (no window, 3,000
	// messages and more ready), the small job waited for about 2,000 of
	// the big job's tasks.
	require.Less(t, got.CompletedTasks-before.CompletedTasks, int64(1200),
		"the small job waited behind about a window of the big job's tasks, not its backlog")
	require.LessOrEqual(t, maxReady, 2*window, "the work queue holds about a window of messages")
	require.Equal(t, warren.JobCompleted, b.waitClosed(t, big.ID))
}

// A job of higher priority gets a larger share of the window: of two jobs
// of the same size submitted together, the one of priority 50 finishes
// while the one of priority 10 has done well under half of its tasks.
// The tasks take 12 ms, so that the run (about 2 s) is long next to the
// first tens of milliseconds, when automatic batching's probes wait for
// the jobs' first results and the shares depend on whose come first.
func TestAHigherPriorityGetsALargerShare(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")
	b.relayWindow = 60
	b.startServer(t, b.store)
	low := b.submitTyped(t, "sleep", 1500, warren.Policy{Priority: 10})
	high := b.submitTyped(t, "sleep", 1500, warren.Policy{Priority: 50})
	runWorker(t, newSleepingWorker(t, b, 12*time.Millisecond))
	runWorker(t, newSleepingWorker(t, b, 12*time.Millisecond))

	closed := <-b.closed
	require.Equal(t, high.ID, closed.id, "the job of priority 50 finishes first")
	got, err := b.store.GetJob(context.Background(), low.ID)
	require.NoError(t, err)
	t.Logf("when the priority-50 job closed, the priority-10 job had %d of 1500 tasks done", got.CompletedTasks)
	require.Less(t, got.CompletedTasks, int64(750), "the low-priority job got about a sixth of the window, not half")
	require.Equal(t, warren.JobCompleted, b.waitClosed(t, low.ID))
}
