package workertest_test

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/worker"
	"github.com/warrenhq/warren/worker/workertest"
)

// count counts the completed and failed outcomes.
func count(_ context.Context, _ worker.ReduceJob, outcomes iter.Seq2[worker.TaskOutcome, error]) (any, error) {
	n := map[string]int{}
	for o, err := range outcomes {
		if err != nil {
			return nil, err
		}
		n[o.State]++
	}
	return n, nil
}

func TestRunReducerCompletesWithTheJobsResult(t *testing.T) {
	t.Parallel()
	outcomes := []worker.TaskOutcome{{TaskID: 1, Result: json.RawMessage(`1`)}, {TaskID: 2, State: protocol.StatusFailed, Error: "boom"}, {TaskID: 4}}
	var seen worker.ReduceJob
	res := workertest.RunReducer(context.Background(), func(ctx context.Context, job worker.ReduceJob, o iter.Seq2[worker.TaskOutcome, error]) (any, error) {
		seen = job
		return count(ctx, job, o)
	}, worker.ReduceJob{Type: "count"}, outcomes, nil)

	require.Equal(t, workertest.Completed, res.Action, "err: %v", res.Err)
	require.JSONEq(t, `{"completed":2,"failed":1}`, string(res.Output))
	require.Equal(t, worker.ReduceJob{JobID: workertest.DefaultJobID, Type: "count", Payload: json.RawMessage("null"),
		ExpectedTasks: 3, Attempt: 1, MaxRetries: warren.DefaultMaxRetries}, seen)
	require.Equal(t, int64(protocol.ReduceTaskID), res.Task.TaskID)
}

func TestRunReducerFailures(t *testing.T) {
	t.Parallel()
	perm := workertest.RunReducer(context.Background(), func(context.Context, worker.ReduceJob, iter.Seq2[worker.TaskOutcome, error]) (any, error) {
		return nil, worker.Permanent(errors.New("no"))
	}, worker.ReduceJob{}, nil, nil)
	require.Equal(t, workertest.Failed, perm.Action)
	require.Equal(t, protocol.ReasonPermanent, perm.Reason)

	flaky := workertest.RunReducer(context.Background(), func(context.Context, worker.ReduceJob, iter.Seq2[worker.TaskOutcome, error]) (any, error) {
		panic("oops")
	}, worker.ReduceJob{}, nil, nil)
	require.Equal(t, workertest.Retried, flaky.Action)
	require.ErrorContains(t, flaky.Err, "handler panicked: oops")

	slow := workertest.RunReducer(context.Background(), func(ctx context.Context, _ worker.ReduceJob, _ iter.Seq2[worker.TaskOutcome, error]) (any, error) {
		<-ctx.Done()
		return 1, nil
	}, worker.ReduceJob{Timeout: 20 * time.Millisecond, MaxRetries: workertest.NoRetries}, nil, nil)
	require.Equal(t, workertest.DeadLettered, slow.Action)
	require.Equal(t, protocol.ReasonTimeout, slow.Reason)
}

func TestRunWorkerReducerRunsTheRegisteredReducer(t *testing.T) {
	t.Parallel()
	w, err := worker.New(worker.Config{})
	require.NoError(t, err)
	type in struct{ Add int }
	w.Reducer("total", worker.TypedReducer(func(_ context.Context, _ worker.ReduceJob, p in, outcomes iter.Seq2[worker.TypedOutcome[int], error]) (int, error) {
		total := p.Add
		for o, err := range outcomes {
			if err != nil {
				return 0, err
			}
			total += o.Result
		}
		return total, nil
	}))
	outcomes := []worker.TaskOutcome{{TaskID: 1, Result: json.RawMessage(`2`)}, {TaskID: 2, Result: json.RawMessage(`3`)}}
	res := workertest.RunWorkerReducer(context.Background(), w, worker.ReduceJob{Type: "total", Payload: json.RawMessage(`{"Add":10}`)}, outcomes, nil)
	require.Equal(t, workertest.Completed, res.Action, "err: %v", res.Err)
	require.JSONEq(t, `15`, string(res.Output))

	bad := []worker.TaskOutcome{{TaskID: 1, Result: json.RawMessage(`"two"`)}}
	res = workertest.RunWorkerReducer(context.Background(), w, worker.ReduceJob{Type: "total"}, bad, nil)
	require.Equal(t, workertest.Failed, res.Action, "a result that does not decode is permanent")
	require.ErrorContains(t, res.Err, "the result of task 1 does not decode into int")

	res = workertest.RunWorkerReducer(context.Background(), w, worker.ReduceJob{Type: "nope"}, nil, nil)
	require.Equal(t, workertest.Unserved, res.Action)
	require.ErrorContains(t, res.Err, `no reducer for task type "nope"`)
}
