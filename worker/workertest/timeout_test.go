package workertest_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/worker"
	"github.com/warrenhq/warren/worker/workertest"
)

// untilDone waits for its context, as a handler that heeds it does, and
// returns a result if the context is never done.
func untilDone(ctx context.Context, _ worker.Task) (any, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(5 * time.Second):
		return "no deadline came", nil
	}
}

// A run past Task.Timeout is Retried, as the worker settles it, with the
// worker's timeout error; on the last attempt it is DeadLettered. The
// handler's context had the deadline, and says why it ended.
func TestWorkertestRetriedPastTheTaskTimeout(t *testing.T) {
	t.Parallel()
	var cause atomic.Value
	h := func(ctx context.Context, tk worker.Task) (any, error) {
		_, ok := ctx.Deadline()
		require.True(t, ok, "the handler's context has the task's deadline")
		v, err := untilDone(ctx, tk)
		cause.Store(context.Cause(ctx))
		return v, err
	}
	res := workertest.Run(context.Background(), h, worker.Task{Timeout: 50 * time.Millisecond}, nil)
	require.Equal(t, workertest.Retried, res.Action, "%+v", res)
	require.Equal(t, protocol.DefaultRetryTiers[0], res.Delay)
	require.EqualError(t, res.Err, "worker: task timeout of 50ms exceeded")
	require.ErrorIs(t, res.Err, context.DeadlineExceeded)
	require.EqualError(t, cause.Load().(error), "worker: task timeout of 50ms exceeded")

	res = workertest.Run(context.Background(), h, worker.Task{Timeout: 50 * time.Millisecond, MaxRetries: workertest.NoRetries}, nil)
	require.Equal(t, workertest.DeadLettered, res.Action)
	require.Equal(t, protocol.ReasonTimeout, res.Reason)
	require.EqualError(t, res.Err, "worker: task timeout of 50ms exceeded")
}

// A handler that ignores its context runs to its end; a result or a
// permanent error it returns after the deadline is a timeout all the same.
func TestWorkertestAnOverrunIgnoresWhatTheHandlerReturned(t *testing.T) {
	t.Parallel()
	for name, ret := range map[string]func() (any, error){
		"result":    func() (any, error) { return 1, nil },
		"permanent": func() (any, error) { return nil, worker.Permanent(errFlaky) },
	} {
		h := func(context.Context, worker.Task) (any, error) {
			time.Sleep(60 * time.Millisecond)
			return ret()
		}
		res := workertest.Run(context.Background(), h, worker.Task{Timeout: 20 * time.Millisecond}, nil)
		require.Equal(t, workertest.Retried, res.Action, name)
		require.EqualError(t, res.Err, "worker: task timeout of 20ms exceeded", name)
		require.Nil(t, res.Output, name)
	}
}

// Within the limit the handler's return decides; without one the
// context has no deadline.
func TestWorkertestWithinTheTaskTimeoutOrWithoutOne(t *testing.T) {
	t.Parallel()
	var deadline atomic.Value
	h := func(ctx context.Context, tk worker.Task) (any, error) {
		d, ok := ctx.Deadline()
		deadline.Store(ok)
		if ok {
			return time.Until(d) > 0, nil
		}
		return nil, nil
	}
	res := workertest.Run(context.Background(), h, worker.Task{Timeout: time.Minute}, nil)
	require.Equal(t, workertest.Completed, res.Action)
	require.JSONEq(t, `true`, string(res.Output))
	require.Equal(t, time.Minute, res.Task.Timeout)

	res = workertest.Run(context.Background(), h, worker.Task{}, nil)
	require.Equal(t, workertest.Completed, res.Action)
	require.False(t, deadline.Load().(bool), "no Timeout: no deadline")
}

// A batch handler's one call has one deadline, the tasks' shared
// Timeout, not one per task: a call past it fails every task.
func TestWorkertestRunBatchHasOneDeadlineForTheCall(t *testing.T) {
	t.Parallel()
	start := time.Now()
	var got time.Time
	h := func(ctx context.Context, ts []worker.Task) []worker.Outcome {
		got, _ = ctx.Deadline()
		<-ctx.Done()
		return make([]worker.Outcome, len(ts))
	}
	tasks := []worker.Task{{Timeout: 40 * time.Millisecond}, {Timeout: 40 * time.Millisecond}, {Timeout: 40 * time.Millisecond}}
	res := workertest.RunBatch(context.Background(), h, tasks, nil)
	require.WithinDuration(t, start.Add(40*time.Millisecond), got, 20*time.Millisecond, "the call's start plus one Timeout")
	require.Len(t, res, 3)
	for i, r := range res {
		require.Equal(t, workertest.Retried, r.Action, "task %d", i)
		require.EqualError(t, r.Err, "worker: task timeout of 40ms exceeded", "task %d", i)
	}

	require.PanicsWithValue(t,
		"workertest: RunBatch with tasks of different Timeouts (1s and 2s); a batch message carries one",
		func() {
			workertest.RunBatch(context.Background(), h, []worker.Task{{Timeout: time.Second}, {Timeout: 2 * time.Second}}, nil)
		})
}
