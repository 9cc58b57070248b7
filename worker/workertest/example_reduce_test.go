package workertest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"

	"github.com/warrenhq/warren/worker"
	"github.com/warrenhq/warren/worker/workertest"
)

// A reducer over its job's map task outcomes, without a broker or a
// server: the job's result, as the worker would publish it.
func ExampleRunReducer() {
	longest := worker.TypedReducer(func(_ context.Context, _ worker.ReduceJob, _ any, outcomes iter.Seq2[worker.TypedOutcome[string], error]) (string, error) {
		best := ""
		for o, err := range outcomes {
			if err != nil {
				return "", err
			}
			if o.Completed() && len(o.Result) > len(best) {
				best = o.Result
			}
		}
		return best, nil
	})
	outcomes := []worker.TaskOutcome{
		{TaskID: 1, State: "completed", Result: json.RawMessage(`"warren"`)},
		{TaskID: 2, State: "failed", Error: "upstream timed out"},
		{TaskID: 3, State: "completed", Result: json.RawMessage(`"rabbit"`)},
		{TaskID: 4, State: "completed", Result: json.RawMessage(`"burrows"`)},
	}
	res := workertest.RunReducer(context.Background(), longest, worker.ReduceJob{Type: "longest"}, outcomes, nil)
	fmt.Println(res.Action, string(res.Output), res.Task.TaskID)
	// Output: completed "burrows" 0
}
