package warren_test

// End-to-end tests of follow-up jobs (a job's then): a completed job
// starts its follow-up, one task per element of its result, against the
// real broker and both stores.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/worker"
)

// chainWorker runs a worker serving "double" (2n, of {"n": n} or of a
// bare number), "split" (n becomes [n, n]) and "fail" (fails for good).
func chainWorker(t *testing.T, b *testBundle) {
	t.Helper()
	w, err := worker.New(b.workerConfig(8))
	require.NoError(t, err)
	number := func(payload json.RawMessage) (int64, error) {
		var p struct{ N int64 }
		if err := json.Unmarshal(payload, &p); err == nil {
			return p.N, nil
		}
		var n int64
		if err := json.Unmarshal(payload, &n); err != nil {
			return 0, worker.Permanent(err)
		}
		return n, nil
	}
	w.Handle("double", func(_ context.Context, tk worker.Task) (any, error) {
		n, err := number(tk.Payload)
		return 2 * n, err
	})
	w.Handle("split", func(_ context.Context, tk worker.Task) (any, error) {
		n, err := number(tk.Payload)
		return []int64{n, n}, err
	})
	w.Handle("fail", func(context.Context, worker.Task) (any, error) {
		return nil, worker.Permanent(errors.New("stage one broke"))
	})
	runWorker(t, w)
}

// submitChain creates a job of n tasks ({"n": i}) of type typ, reduced by
// reduce, with the follow-up then, and wakes the relays.
func (b *testBundle) submitChain(t *testing.T, typ, reduce string, n int, then *store.NewJob) warren.Job {
	t.Helper()
	tasks := func(yield func(json.RawMessage, error) bool) {
		for i := 1; i <= n; i++ {
			if !yield(json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), nil) {
				return
			}
		}
	}
	job, created, err := b.store.CreateJob(context.Background(),
		store.NewJob{Type: typ, Policy: warren.Policy{Reduce: reduce, MaxRetries: 1}, Then: then}, tasks)
	require.NoError(t, err)
	require.True(t, created)
	b.wakeRelays()
	return job
}

// next waits for job id to close as completed and returns the follow-up
// it started.
func (b *testBundle) next(t *testing.T, id string) warren.Job {
	t.Helper()
	require.Equal(t, warren.JobCompleted, b.waitClosed(t, id))
	job, err := b.store.GetJob(context.Background(), id)
	require.NoError(t, err)
	require.NotEmpty(t, job.NextJob, "job %s started its follow-up", id)
	next, err := b.store.GetJob(context.Background(), job.NextJob)
	require.NoError(t, err)
	require.Equal(t, id, next.PreviousJob)
	return next
}

// result is job id's stored result.
func (b *testBundle) result(t *testing.T, id string) string {
	t.Helper()
	raw, err := b.store.JobResult(context.Background(), id)
	require.NoError(t, err)
	return string(raw)
}

// A two-stage chain: stage one's collected results are stage two's
// tasks, one per element, in order; stage two sums what it made of them.
func TestThenTwoStages(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		b := setup(t, kind)
		b.startServer(t, b.store)
		chainWorker(t, b)
		first := b.submitChain(t, "double", "collect", 5, &store.NewJob{Type: "double", Policy: warren.Policy{Reduce: "collect", MaxRetries: 1}})
		second := b.next(t, first.ID)
		require.JSONEq(t, `[2,4,6,8,10]`, b.result(t, first.ID))
		require.Equal(t, int64(5), second.ExpectedTasks)
		require.Equal(t, warren.JobCompleted, b.waitClosed(t, second.ID))
		require.JSONEq(t, `[4,8,12,16,20]`, b.result(t, second.ID), "one task per element, in order")
	})
}

// A three-stage chain, whose middle stage's tasks each make an array that
// "concat" flattens: the chain runs to its end, each job naming the next.
func TestThenThreeStages(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		b := setup(t, kind)
		b.startServer(t, b.store)
		chainWorker(t, b)
		third := &store.NewJob{Type: "double", Policy: warren.Policy{Reduce: "sum", MaxRetries: 1}}
		first := b.submitChain(t, "double", "collect", 3,
			&store.NewJob{Type: "split", Policy: warren.Policy{Reduce: "concat", MaxRetries: 1}, Then: third})
		second := b.next(t, first.ID)
		last := b.next(t, second.ID)
		require.JSONEq(t, `[2,2,4,4,6,6]`, b.result(t, second.ID))
		require.Equal(t, int64(6), last.ExpectedTasks)
		require.Equal(t, warren.JobCompleted, b.waitClosed(t, last.ID))
		require.JSONEq(t, `48`, b.result(t, last.ID))
		closed, err := b.store.GetJob(context.Background(), last.ID)
		require.NoError(t, err)
		require.Empty(t, closed.NextJob, "the chain ends")
	})
}

// A failed first stage starts nothing; a result that is not an array
// fails the follow-up at once, with the reason, and the first stage stays
// completed.
func TestThenAfterAFailureOrANonArray(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		b := setup(t, kind)
		b.startServer(t, b.store)
		chainWorker(t, b)
		then := &store.NewJob{Type: "double", Policy: warren.Policy{Reduce: "collect", MaxRetries: 1}}
		failing := b.submitChain(t, "fail", "collect", 2, then)
		require.Equal(t, warren.JobFailed, b.waitClosed(t, failing.ID))
		job, err := b.store.GetJob(context.Background(), failing.ID)
		require.NoError(t, err)
		require.Empty(t, job.NextJob, "a failed job starts nothing")

		summed := b.submitChain(t, "double", "sum", 3, then)
		bad := b.next(t, summed.ID)
		require.JSONEq(t, `12`, b.result(t, summed.ID))
		require.Equal(t, warren.JobFailed, bad.State)
		require.Contains(t, bad.Error, "the previous job's result is not a JSON array (it is a number)")
		counts, err := b.store.CountJobs(context.Background())
		require.NoError(t, err)
		require.Equal(t, map[warren.JobState]int64{warren.JobFailed: 2, warren.JobCompleted: 1}, withoutZero(counts))
	})
}

// withoutZero drops the states of no job.
func withoutZero(counts map[warren.JobState]int64) map[warren.JobState]int64 {
	out := map[warren.JobState]int64{}
	for s, n := range counts {
		if n > 0 {
			out[s] = n
		}
	}
	return out
}
