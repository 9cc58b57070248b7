package store_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

func TestReadyToClose(t *testing.T) {
	t.Parallel()
	failFast := warren.Policy{FailFast: true, ToleratedFailures: 1, ToleratedFailurePercent: 50}
	tests := []struct {
		name                        string
		policy                      warren.Policy
		expected, completed, failed int64
		reduceState                 string
		want                        bool
	}{
		{"every task finished", warren.Policy{}, 3, 2, 1, "", true},
		{"tasks left", warren.Policy{}, 3, 1, 1, "", false},
		{"failures over tolerance wait without fail-fast", warren.Policy{}, 3, 0, 2, "", false},
		{"fail-fast within tolerance waits", failFast, 4, 0, 1, "", false},
		{"fail-fast over the count", failFast, 4, 0, 2, "", true},
		{"fail-fast over the share", warren.Policy{FailFast: true, ToleratedFailures: 10, ToleratedFailurePercent: 20}, 5, 0, 2, "", true},
		{"fail-fast without failures waits", failFast, 4, 3, 0, "", false},
		{"no tasks", warren.Policy{}, 0, 0, 0, "", true},
		{"reducing waits", warren.Policy{}, 3, 3, 0, warren.ReduceRunning, false},
		{"reduce completed", warren.Policy{}, 3, 3, 0, warren.ReduceCompleted, true},
		{"reduce failed", warren.Policy{}, 3, 3, 0, warren.ReduceFailed, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			j := warren.Job{State: warren.JobRunning, Policy: tt.policy,
				ExpectedTasks: tt.expected, CompletedTasks: tt.completed, FailedTasks: tt.failed, ReduceState: tt.reduceState}
			require.Equal(t, tt.want, store.ReadyToClose(j))
		})
	}
}

func TestResultLocationIsTheServersResultPath(t *testing.T) {
	t.Parallel()
	require.Equal(t, "/v1/jobs/01ABC/result", store.ResultLocation("01ABC"))
}
