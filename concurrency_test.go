package warren_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/worker"
)

// concurrencyCounter counts the runs of each job's tasks in progress at
// once, and the most it saw.
type concurrencyCounter struct {
	mu      sync.Mutex
	running map[string]int
	most    map[string]int
	runs    map[string]int
}

func newConcurrencyCounter() *concurrencyCounter {
	return &concurrencyCounter{running: map[string]int{}, most: map[string]int{}, runs: map[string]int{}}
}

func (c *concurrencyCounter) start(jobID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running[jobID]++
	c.runs[jobID]++
	c.most[jobID] = max(c.most[jobID], c.running[jobID])
}

func (c *concurrencyCounter) end(jobID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running[jobID]--
}

func (c *concurrencyCounter) mostOf(jobID string) (most, runs int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.most[jobID], c.runs[jobID]
}

// newCountingWorker is a worker of concurrency 8 whose "capped" tasks
// take d each, counted by c, and fail once (a retry) when their task id
// is a multiple of 7.
func newCountingWorker(t *testing.T, b *testBundle, c *concurrencyCounter, d time.Duration) *worker.Worker {
	t.Helper()
	w, err := worker.New(b.workerConfig(8))
	require.NoError(t, err)
	w.Handle("capped", func(ctx context.Context, tk worker.Task) (any, error) {
		c.start(tk.JobID)
		defer c.end(tk.JobID)
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if tk.TaskID%7 == 0 && tk.Attempt == 1 {
			return nil, errors.New("flaky once")
		}
		return 1, nil
	})
	return w
}

// A job of max_concurrency 3 and 30 tasks of 150 ms never has more than
// 3 tasks running at once across two workers of concurrency 8, its
// retries and batches included, and takes about 30 * 150 ms / 3, not
// the relay's poll interval per slot: an outcome of a job its cap held
// back wakes the relay.
func TestAJobRunsAtMostItsCapAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		batch int
	}{{"automatic batches", 0}, {"batches of 2", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			forEachStore(t, func(t *testing.T, kind string) {
				b := setupWith(t, kind, &broker.TopologyOptions{RetryTiers: []time.Duration{50 * time.Millisecond}})
				b.relayPoll = 250 * time.Millisecond // the default: the cap must not wait for it
				b.startServer(t, b.store)
				c := newConcurrencyCounter()
				runWorker(t, newCountingWorker(t, b, c, 150*time.Millisecond))
				runWorker(t, newCountingWorker(t, b, c, 150*time.Millisecond))

				const n, limit = 30, 3
				start := time.Now()
				job := b.submitTyped(t, "capped", n, warren.Policy{MaxConcurrency: limit, BatchSize: tc.batch, MaxRetries: 2})
				require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID))
				took := time.Since(start)
				most, runs := c.mostOf(job.ID)
				t.Logf("%s, %s: %d runs of %d tasks, at most %d at once, closed in %v (ideal %v)",
					kind, tc.name, runs, n, most, took, time.Duration(runs)*150*time.Millisecond/limit)
				require.Equal(t, n+4, runs, "tasks 7, 14, 21 and 28 ran twice")
				require.LessOrEqual(t, most, limit, "never more than the cap at once")
				if tc.batch == 0 {
					require.Equal(t, limit, most, "the cap was used")
				} else {
					// A batch message's tasks hold their slots while it is
					// out, though its worker runs them one after another.
					require.GreaterOrEqual(t, most, 2, "a batch and a task beside it")
				}
				require.Less(t, took, 6*time.Second, "the job took far longer than 34 runs of 150 ms, 3 at a time")
			})
		})
	}
}

// A capped job does not hold back an uncapped job on the same queue: what
// the capped one cannot use of the relay's window goes to the other,
// which finishes while the capped one is still far from done.
func TestACappedJobDoesNotHoldBackItsNeighbour(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		b := setupWith(t, kind, &broker.TopologyOptions{RetryTiers: []time.Duration{50 * time.Millisecond}})
		b.relayWindow = 100
		b.startServer(t, b.store)
		c := newConcurrencyCounter()
		runWorker(t, newCountingWorker(t, b, c, 20*time.Millisecond))
		runWorker(t, newCountingWorker(t, b, c, 20*time.Millisecond))

		capped := b.submitTyped(t, "capped", 100, warren.Policy{MaxConcurrency: 1, MaxRetries: 2})
		free := b.submitTyped(t, "capped", 200, warren.Policy{MaxRetries: 2})
		require.Equal(t, warren.JobCompleted, b.waitClosed(t, free.ID))
		got, err := b.store.GetJob(context.Background(), capped.ID)
		require.NoError(t, err)
		most, _ := c.mostOf(free.ID)
		t.Logf("%s: the uncapped job ran up to %d tasks at once and closed while the capped one had %d of 100 done", kind, most, got.CompletedTasks)
		require.False(t, got.State.Terminal(), "the capped job is still running")
		require.Less(t, got.CompletedTasks, int64(75), "the capped job ran one task at a time meanwhile")
		require.Greater(t, most, 1, "the uncapped job ran tasks side by side")
		most, _ = c.mostOf(capped.ID)
		require.Equal(t, 1, most)
		require.Equal(t, warren.JobCompleted, b.waitClosed(t, capped.ID))
	})
}
