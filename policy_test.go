package warren_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
)

// A job's own retention is 0 (the server's) or between a second and
// MaxRetention; anything else names the field.
func TestPolicyValidateRetention(t *testing.T) {
	t.Parallel()
	for _, ok := range []time.Duration{0, time.Second, 90 * 24 * time.Hour, warren.MaxRetention} {
		require.NoError(t, warren.Policy{Retention: ok}.Validate(), "retention %s", ok)
	}
	for _, bad := range []time.Duration{-time.Second, time.Millisecond, warren.MaxRetention + time.Second} {
		require.ErrorContains(t, warren.Policy{Retention: bad}.Validate(), "retention must be", "retention %s", bad)
	}
}

// A reduce task names its type, may name a valid queue and a JSON
// payload, and replaces Reduce; its queue defaults to the job's.
func TestPolicyReduceTask(t *testing.T) {
	t.Parallel()
	ok := warren.Policy{Queue: "maps", ReduceTask: &warren.ReduceTask{Type: "sum"}}
	require.NoError(t, ok.Validate())
	require.Equal(t, "maps", ok.ReduceQueue(), "the job's queue")
	require.Equal(t, "default", warren.Policy{}.ReduceQueue(), "no reduce task: the job's queue")
	require.Equal(t, "reducers", warren.Policy{ReduceTask: &warren.ReduceTask{Type: "sum", Queue: "reducers"}}.ReduceQueue())
	for name, bad := range map[string]warren.Policy{
		"reduce.task":    {ReduceTask: &warren.ReduceTask{}},
		"reduce must be": {Reduce: "collect", ReduceTask: &warren.ReduceTask{Type: "sum"}},
		"reduce.queue":   {ReduceTask: &warren.ReduceTask{Type: "sum", Queue: "Bad Queue"}},
		"reduce.payload": {ReduceTask: &warren.ReduceTask{Type: "sum", Payload: []byte(`{`)}},
	} {
		require.ErrorContains(t, bad.Validate(), name)
	}
}

// A job's concurrency cap is 0 (none) or between 1 and
// MaxConcurrencyLimit; anything else names the field.
func TestPolicyValidateMaxConcurrency(t *testing.T) {
	t.Parallel()
	for _, ok := range []int{0, 1, 50, warren.MaxConcurrencyLimit} {
		require.NoError(t, warren.Policy{MaxConcurrency: ok}.Validate(), "max_concurrency %d", ok)
	}
	for _, bad := range []int{-1, warren.MaxConcurrencyLimit + 1} {
		require.ErrorContains(t, warren.Policy{MaxConcurrency: bad}.Validate(), "max_concurrency must be between 1 and 10000", "max_concurrency %d", bad)
	}
}
