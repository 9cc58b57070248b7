package storetest

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// reduceJob creates a job of n tasks with a reduce task of type "sum"
// on queue "reducers" with payload {"k":1}, and policy's other fields.
func reduceJob(t *testing.T, s store.Store, policy warren.Policy, n int) warren.Job {
	t.Helper()
	policy.ReduceTask = &warren.ReduceTask{Type: "sum", Queue: "reducers", Payload: json.RawMessage(`{"k":1}`)}
	return createJob(t, s, store.NewJob{Policy: policy}, n)
}

func testReduce(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("CreateJobKeepsTheReduceTask", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := reduceJob(t, s, warren.Policy{}, 2)
		got := getJob(t, s, job.ID)
		require.Equal(t, &warren.ReduceTask{Type: "sum", Queue: "reducers", Payload: json.RawMessage(`{"k":1}`)}, got.Policy.ReduceTask)
		require.Empty(t, got.ReduceState, "no reduce task started")
		require.Equal(t, "reducers", got.Policy.ReduceQueue())
		plain := newJob(t, s, 1)
		require.Nil(t, getJob(t, s, plain.ID).Policy.ReduceTask)
	})
}
