package workertest_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/worker"
	"github.com/warrenhq/warren/worker/workertest"
)

var errFlaky = errors.New("upstream timed out")

// echo completes with its payload.
func echo(_ context.Context, t worker.Task) (any, error) { return t.Payload, nil }

// flaky always fails transiently.
func flaky(context.Context, worker.Task) (any, error) { return nil, errFlaky }

func TestWorkertestCompletedWithTheResultAndDefaults(t *testing.T) {
	t.Parallel()
	var seen worker.Task
	res := workertest.Run(context.Background(), func(_ context.Context, tk worker.Task) (any, error) {
		seen = tk
		return map[string]int{"n": 2}, nil
	}, worker.Task{}, nil)

	require.Equal(t, workertest.Completed, res.Action, "err: %v", res.Err)
	require.JSONEq(t, `{"n":2}`, string(res.Output))
	require.NoError(t, res.Err)
	require.Zero(t, res.Delay)
	require.Empty(t, res.Reason)
	want := worker.Task{JobID: workertest.DefaultJobID, TaskID: 1, Attempt: 1,
		MaxRetries: warren.DefaultMaxRetries, Payload: json.RawMessage("null")}
	require.Equal(t, want, exported(seen), "a zero task gets the defaults")
	require.Equal(t, want, res.Task)
}

func TestWorkertestKeepsTheTasksFields(t *testing.T) {
	t.Parallel()
	task := worker.Task{JobID: "j", TaskID: 9, Type: "echo", Attempt: 2, MaxRetries: 5, Payload: json.RawMessage(`[1]`)}
	res := workertest.Run(context.Background(), echo, task, nil)
	require.Equal(t, workertest.Completed, res.Action)
	require.Equal(t, task, res.Task)
	require.JSONEq(t, `[1]`, string(res.Output))
}

func TestWorkertestRetriedWithTheTiersDelay(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		attempt int
		opts    *workertest.Opts
		delay   time.Duration
	}{
		{1, nil, protocol.DefaultRetryTiers[0]},
		{3, nil, protocol.DefaultRetryTiers[2]},
		{1, &workertest.Opts{RetryTiers: []time.Duration{time.Minute, time.Hour}}, time.Minute},
		{3, &workertest.Opts{RetryTiers: []time.Duration{time.Minute, time.Hour}}, time.Hour}, // past the last tier: the last
	} {
		res := workertest.Run(context.Background(), flaky, worker.Task{Attempt: tc.attempt, MaxRetries: 5}, tc.opts)
		require.Equal(t, workertest.Retried, res.Action, "attempt %d", tc.attempt)
		require.Equal(t, tc.delay, res.Delay, "attempt %d, opts %+v", tc.attempt, tc.opts)
		require.ErrorIs(t, res.Err, errFlaky)
		require.Empty(t, res.Reason)
		require.Nil(t, res.Output)
	}
}

func TestWorkertestDeadLetteredOnTheLastAttempt(t *testing.T) {
	t.Parallel()
	res := workertest.Run(context.Background(), flaky, worker.Task{Attempt: warren.DefaultMaxRetries + 1}, nil)
	require.Equal(t, workertest.DeadLettered, res.Action)
	require.Equal(t, protocol.ReasonRetriesExhausted, res.Reason)
	require.ErrorIs(t, res.Err, errFlaky)

	res = workertest.Run(context.Background(), flaky, worker.Task{Attempt: warren.DefaultMaxRetries}, nil)
	require.Equal(t, workertest.Retried, res.Action, "the attempt before the last still retries")
}

func TestWorkertestNoRetries(t *testing.T) {
	t.Parallel()
	res := workertest.Run(context.Background(), flaky, worker.Task{MaxRetries: workertest.NoRetries}, nil)
	require.Equal(t, workertest.DeadLettered, res.Action, "no retries: the first run is the last")
	require.Equal(t, 0, res.Task.MaxRetries, "the handler sees MaxRetries 0")
}

func TestWorkertestFailedOnAPermanentError(t *testing.T) {
	t.Parallel()
	errBad := errors.New("no such image")
	res := workertest.Run(context.Background(), func(context.Context, worker.Task) (any, error) {
		return nil, worker.Permanent(errBad)
	}, worker.Task{}, nil)
	require.Equal(t, workertest.Failed, res.Action)
	require.Equal(t, protocol.ReasonPermanent, res.Reason)
	require.ErrorIs(t, res.Err, errBad)
	require.Zero(t, res.Delay)
}

func TestWorkertestFailedOnAResultThatDoesNotMarshal(t *testing.T) {
	t.Parallel()
	res := workertest.Run(context.Background(), func(context.Context, worker.Task) (any, error) {
		return func() {}, nil
	}, worker.Task{}, nil)
	require.Equal(t, workertest.Failed, res.Action)
	require.Equal(t, protocol.ReasonPermanent, res.Reason)
	require.ErrorContains(t, res.Err, "marshal the handler's result of type func()")
}

func TestWorkertestFailedOnABadPayloadThroughTyped(t *testing.T) {
	t.Parallel()
	h := worker.Typed(func(_ context.Context, _ worker.Task, in struct{ N int }) (int, error) { return in.N, nil })
	res := workertest.Run(context.Background(), h, worker.Task{Payload: json.RawMessage(`{"N":"x"}`)}, nil)
	require.Equal(t, workertest.Failed, res.Action)
	require.Equal(t, protocol.ReasonPermanent, res.Reason)
}

func TestWorkertestPanicIsTransient(t *testing.T) {
	t.Parallel()
	panics := func(context.Context, worker.Task) (any, error) { panic("nil map") }
	res := workertest.Run(context.Background(), panics, worker.Task{}, nil)
	require.Equal(t, workertest.Retried, res.Action)
	require.EqualError(t, res.Err, "worker: handler panicked: nil map")

	res = workertest.Run(context.Background(), panics, worker.Task{MaxRetries: workertest.NoRetries}, nil)
	require.Equal(t, workertest.DeadLettered, res.Action)
	require.Equal(t, protocol.ReasonRetriesExhausted, res.Reason)
}

func TestWorkertestRequeuedWhenTheContextIsDone(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	res := workertest.Run(ctx, func(context.Context, worker.Task) (any, error) {
		cancel() // as the worker does at shutdown, while the handler runs
		return 1, nil
	}, worker.Task{}, nil)
	require.Equal(t, workertest.Requeued, res.Action, "the worker discards what a cancelled handler returns")
	require.ErrorIs(t, res.Err, context.Canceled)
	require.Nil(t, res.Output)
}

func TestWorkertestRunBatchDecidesPerTask(t *testing.T) {
	t.Parallel()
	h := func(_ context.Context, ts []worker.Task) []worker.Outcome {
		return []worker.Outcome{
			{Value: ts[0].TaskID},
			{Err: errFlaky},
			{Err: worker.Permanent(errFlaky)},
		}
	}
	res := workertest.RunBatch(context.Background(), h, []worker.Task{{}, {}, {TaskID: 7}}, nil)
	require.Len(t, res, 3)
	require.Equal(t, workertest.Completed, res[0].Action)
	require.JSONEq(t, `1`, string(res[0].Output))
	require.Equal(t, workertest.Retried, res[1].Action)
	require.Equal(t, protocol.DefaultRetryTiers[0], res[1].Delay)
	require.Equal(t, workertest.Failed, res[2].Action)
	require.Equal(t, []int64{1, 2, 7}, []int64{res[0].Task.TaskID, res[1].Task.TaskID, res[2].Task.TaskID},
		"a zero TaskID is the task's position")
}

func TestWorkertestRunBatchPanicOrWrongCountFailsEveryTask(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		h   worker.BatchHandlerFunc
		err string
	}{
		"panic": {
			func(context.Context, []worker.Task) []worker.Outcome { panic("boom") },
			"worker: batch handler panicked: boom",
		},
		"wrong count": {
			func(context.Context, []worker.Task) []worker.Outcome { return []worker.Outcome{{}} },
			"worker: batch handler returned 1 outcomes for 2 tasks",
		},
	} {
		res := workertest.RunBatch(context.Background(), tc.h, make([]worker.Task, 2), nil)
		require.Len(t, res, 2, name)
		for i, r := range res {
			require.Equal(t, workertest.Retried, r.Action, "%s: task %d", name, i)
			require.EqualError(t, r.Err, tc.err, "%s: task %d", name, i)
		}
	}
}

func TestWorkertestRunBatchWithNoTasks(t *testing.T) {
	t.Parallel()
	called := false
	res := workertest.RunBatch(context.Background(), func(context.Context, []worker.Task) []worker.Outcome {
		called = true
		return nil
	}, nil, nil)
	require.Nil(t, res)
	require.False(t, called)
}

func TestWorkertestRunWorkerRunsTheRegisteredHandler(t *testing.T) {
	t.Parallel()
	w, err := worker.New(worker.Config{RetryTiers: []time.Duration{2 * time.Second}})
	require.NoError(t, err)
	w.Handle("echo", echo).Handle("flaky", flaky)
	w.HandleBatch("sum", func(_ context.Context, ts []worker.Task) []worker.Outcome {
		out := make([]worker.Outcome, len(ts))
		for i := range ts {
			out[i].Value = len(ts)
		}
		return out
	})
	ctx := context.Background()

	res := workertest.RunWorker(ctx, w, worker.Task{Type: "echo", Payload: json.RawMessage(`"hi"`)}, nil)
	require.Equal(t, workertest.Completed, res.Action)
	require.JSONEq(t, `"hi"`, string(res.Output))

	res = workertest.RunWorker(ctx, w, worker.Task{Type: "sum"}, nil)
	require.Equal(t, workertest.Completed, res.Action)
	require.JSONEq(t, `1`, string(res.Output), "a batch handler gets a batch of one")

	res = workertest.RunWorker(ctx, w, worker.Task{Type: "flaky"}, nil)
	require.Equal(t, workertest.Retried, res.Action)
	require.Equal(t, 2*time.Second, res.Delay, "the worker's own retry tiers")
	res = workertest.RunWorker(ctx, w, worker.Task{Type: "flaky"}, &workertest.Opts{RetryTiers: []time.Duration{time.Minute}})
	require.Equal(t, time.Minute, res.Delay, "Opts override the worker's tiers")
}

func TestWorkertestRunWorkerUnknownType(t *testing.T) {
	t.Parallel()
	w, err := worker.New(worker.Config{})
	require.NoError(t, err)
	w.Handle("echo", echo)
	res := workertest.RunWorker(context.Background(), w, worker.Task{Type: "ecoh"}, nil)
	require.Equal(t, workertest.Unserved, res.Action, "it waits for a worker that serves it")
	require.Equal(t, time.Second, res.Delay, "in the first retry tier")
	require.EqualError(t, res.Err, `worker: no handler for task type "ecoh" on this queue`)
	res = workertest.RunWorker(context.Background(), w, worker.Task{}, nil)
	require.Equal(t, workertest.Failed, res.Action, "no worker serves a task without a type")
	require.Equal(t, protocol.ReasonUnknownType, res.Reason)
}

func TestWorkertestPanicsOnMisuse(t *testing.T) {
	t.Parallel()
	require.PanicsWithValue(t, "workertest: Run with a nil handler", func() {
		workertest.Run(context.Background(), nil, worker.Task{}, nil)
	})
	require.PanicsWithValue(t, "workertest: RunBatch with a nil handler", func() {
		workertest.RunBatch(context.Background(), nil, nil, nil)
	})
	require.PanicsWithValue(t,
		"workertest: Opts.RetryTiers: retry tier 0 is 1.5ms; tiers must be positive whole milliseconds",
		func() {
			workertest.Run(context.Background(), echo, worker.Task{}, &workertest.Opts{RetryTiers: []time.Duration{1500 * time.Microsecond}})
		})
}

func TestWorkertestActionString(t *testing.T) {
	t.Parallel()
	names := map[workertest.Action]string{
		workertest.Completed: "completed", workertest.Retried: "retried", workertest.Failed: "failed",
		workertest.DeadLettered: "dead-lettered", workertest.Requeued: "requeued", workertest.Unserved: "unserved", 0: "Action(0)",
	}
	for a, name := range names {
		require.Equal(t, name, a.String())
	}
}

// exported is t's exported fields: the Task a handler gets also holds
// what records its run's spawn (worker.Task.Spawn).
func exported(t worker.Task) worker.Task {
	return worker.Task{JobID: t.JobID, TaskID: t.TaskID, Type: t.Type, Attempt: t.Attempt, MaxRetries: t.MaxRetries,
		Timeout: t.Timeout, Payload: t.Payload}
}
