package warren_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/deadletters"
	"github.com/warrenhq/warren/internal/relay"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/worker"
)

// doubleOf is the "double" handlers' result for a task.
func doubleOf(t *testing.T, tk worker.Task) int {
	var p struct{ N int }
	require.NoError(t, json.Unmarshal(tk.Payload, &p))
	return 2 * p.N
}

// A job sent in batches closes exactly like one sent task by task: every
// task recorded once, results in task order, with large aggregator
// batches, high concurrency, several workers and a batch handler.
func TestBatchedJobClosesExactly(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		b := setup(t, kind)
		b.aggBatch, b.aggLinger = 2000, 20*time.Millisecond
		b.startServer(t, b.store)
		const n, size = 5000, 32
		var calls, tasks atomic.Int64
		for range 2 {
			w, err := worker.New(b.workerConfig(32))
			require.NoError(t, err)
			w.HandleBatch("double", func(_ context.Context, ts []worker.Task) []worker.Outcome {
				calls.Add(1)
				tasks.Add(int64(len(ts)))
				out := make([]worker.Outcome, len(ts))
				for i, tk := range ts {
					out[i].Value = doubleOf(t, tk)
				}
				return out
			})
			runWorker(t, w)
		}
		job := b.submit(t, n, warren.Policy{BatchSize: size})
		require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID))
		b.expectDoubled(t, job.ID, n)
		require.Equal(t, int64(n), b.applied.Load(), "each task recorded once")
		require.Equal(t, int64(n), tasks.Load(), "no task ran twice")
		// One handler call per batch of 32. On PostgreSQL the relay's
		// concurrent rounds may each end the job's tail with a short batch,
		// so there may be one more call per round beyond the first.
		full := int64((n + size - 1) / size)
		require.GreaterOrEqual(t, calls.Load(), full, "one handler call per batch of %d", size)
		require.LessOrEqual(t, calls.Load(), full+int64(relay.DefaultConcurrency-1), "one handler call per batch of %d", size)
		for _, tk := range allTasks(t, b.store, job.ID) {
			require.Equal(t, 1, tk.Attempts)
			require.NotNil(t, tk.StartedAt)
			require.NotNil(t, tk.FinishedAt)
		}
	})
}

// In a batch, each task keeps its own outcome: a transient failure retries
// only that task, a permanent one dead-letters only that task, and the
// others complete from the batch's one run.
func TestBatchRetriesAndFailsOnlyItsFailingTasks(t *testing.T) {
	t.Parallel()
	b := setupWith(t, "sqlite", &broker.TopologyOptions{RetryTiers: []time.Duration{50 * time.Millisecond}})
	b.startServer(t, b.store)
	var mu sync.Mutex
	runs := map[int64]int{}
	w, err := worker.New(b.workerConfig(4))
	require.NoError(t, err)
	w.Handle("double", func(_ context.Context, tk worker.Task) (any, error) {
		mu.Lock()
		runs[tk.TaskID]++
		mu.Unlock()
		switch tk.TaskID % 10 {
		case 3:
			if tk.Attempt == 1 {
				return nil, errors.New("flaky once")
			}
		case 7:
			return nil, worker.Permanent(errors.New("bad input"))
		}
		return doubleOf(t, tk), nil
	})
	runWorker(t, w)

	const n = 50
	job := b.submit(t, n, warren.Policy{BatchSize: 10, MaxRetries: 2, ToleratedFailures: 5, ToleratedFailurePercent: 10})
	require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID))
	got, err := b.store.GetJob(context.Background(), job.ID)
	require.NoError(t, err)
	require.Equal(t, int64(45), got.CompletedTasks)
	require.Equal(t, int64(5), got.FailedTasks)

	mu.Lock()
	defer mu.Unlock()
	for _, tk := range allTasks(t, b.store, job.ID) {
		switch tk.TaskID % 10 {
		case 3:
			require.Equal(t, warren.TaskCompleted, tk.State, "task %d", tk.TaskID)
			require.Equal(t, 2, tk.Attempts, "task %d ran again alone", tk.TaskID)
			require.Equal(t, 2, runs[tk.TaskID], "task %d", tk.TaskID)
		case 7:
			require.Equal(t, warren.TaskFailed, tk.State, "task %d", tk.TaskID)
			require.Equal(t, 1, tk.Attempts, "task %d", tk.TaskID)
			require.Contains(t, tk.Error, "bad input")
			require.Equal(t, 1, runs[tk.TaskID], "task %d", tk.TaskID)
		default:
			require.Equal(t, warren.TaskCompleted, tk.State, "task %d", tk.TaskID)
			require.Equal(t, 1, tk.Attempts, "task %d", tk.TaskID)
			require.Equal(t, 1, runs[tk.TaskID], "task %d is not rerun for its batch-mates", tk.TaskID)
			require.JSONEq(t, strconv.FormatInt(2*tk.TaskID, 10), string(tk.Result))
		}
	}
	// The dead-letter queue holds exactly the permanently failed tasks,
	// each as a single task message.
	msgs, err := b.dlq(t).List(context.Background(), deadletters.Filter{JobID: job.ID})
	require.NoError(t, err)
	var ids []int64
	for _, m := range msgs {
		require.Equal(t, protocol.ReasonPermanent, m.Reason)
		ids = append(ids, m.TaskID)
	}
	require.ElementsMatch(t, []int64{7, 17, 27, 37, 47}, ids)
}

// A batch that comes back unacked (its worker died or lost its
// connection mid-batch) is split into single task messages, so that a
// task that kills its worker meets the delivery limit alone instead of
// taking its batch-mates with it.
func TestRedeliveredBatchIsSplitIntoSingleTasks(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")
	b.startServer(t, b.store)
	job := b.submit(t, 8, warren.Policy{BatchSize: 8})

	// A worker that dies on its first batch: it takes the batch and
	// returns it unacked by closing its channel.
	ch, ds := takeTasks(t, b.admin, b.names.TasksQueue, 1)
	tasks, batch, err := protocol.DecodeTasks(ds[0].Body)
	require.NoError(t, err)
	require.True(t, batch)
	require.Len(t, tasks, 8)
	require.NoError(t, ch.Close())

	var split atomic.Int64
	var mu sync.Mutex
	var runs []int64
	cfg := b.workerConfig(1)
	cfg.OnEvent = func(ev worker.Event) {
		if ev.Kind == worker.EventSplit {
			split.Add(1)
		}
	}
	w, err := worker.New(cfg)
	require.NoError(t, err)
	w.Handle("double", func(_ context.Context, tk worker.Task) (any, error) {
		mu.Lock()
		runs = append(runs, tk.TaskID)
		mu.Unlock()
		return doubleOf(t, tk), nil
	})
	runWorker(t, w)
	require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID))
	b.expectDoubled(t, job.ID, 8)
	require.Equal(t, int64(8), split.Load(), "one split event per task")
	mu.Lock()
	defer mu.Unlock()
	require.ElementsMatch(t, []int64{1, 2, 3, 4, 5, 6, 7, 8}, runs, "each task ran once, from its own message")
}

// A batch handler that panics, or returns the wrong number of outcomes,
// fails every task of its batch transiently: each is retried on its own
// and completes.
func TestBrokenBatchHandlerRetriesEveryTask(t *testing.T) {
	t.Parallel()
	b := setupWith(t, "sqlite", &broker.TopologyOptions{RetryTiers: []time.Duration{50 * time.Millisecond}})
	b.startServer(t, b.store)
	var calls atomic.Int64
	w, err := worker.New(b.workerConfig(4))
	require.NoError(t, err)
	w.HandleBatch("double", func(_ context.Context, ts []worker.Task) []worker.Outcome {
		calls.Add(1)
		if ts[0].Attempt == 1 {
			if ts[0].TaskID == 1 {
				panic("broken batch handler")
			}
			return make([]worker.Outcome, len(ts)-1) // one short
		}
		out := make([]worker.Outcome, len(ts))
		for i, tk := range ts {
			out[i].Value = doubleOf(t, tk)
		}
		return out
	})
	runWorker(t, w)

	job := b.submit(t, 8, warren.Policy{BatchSize: 4, MaxRetries: 1})
	require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID))
	b.expectDoubled(t, job.ID, 8)
	for _, tk := range allTasks(t, b.store, job.ID) {
		require.Equal(t, 2, tk.Attempts, "task %d failed with its batch, then ran alone", tk.TaskID)
	}
	require.Equal(t, int64(2+8), calls.Load(), "two broken batch calls, then one call per retried task")
}
