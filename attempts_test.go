package warren_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
)

// Every run of a task reaches the store as data: a retried run through
// the worker's attempt message, the last with its outcome; a panic's
// stack travels as its traceback, through the attempt message and the
// dead letter alike.
func TestEveryAttemptIsKept(t *testing.T) {
	t.Parallel()
	b := setupFailures(t, "sqlite")
	b.startServer(t, b.store)
	job := b.submit(t, 10, warren.Policy{MaxRetries: 2, ToleratedFailures: 2, ToleratedFailurePercent: 20})
	runWorker(t, mixedWorker(t, b, map[int64]bool{7: true}, nil))
	require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID))

	ctx := context.Background()
	outcomes := func(id int64) []warren.AttemptOutcome {
		as, err := b.store.TaskAttempts(ctx, job.ID, id)
		require.NoError(t, err)
		var got []warren.AttemptOutcome
		for _, a := range as {
			got = append(got, a.Outcome)
		}
		return got
	}
	// The retried runs' messages were confirmed before their retries ran,
	// and so reach the results queue before the outcome that closed the
	// job; a redelivery may still hold one back for a moment.
	want := map[int64][]warren.AttemptOutcome{
		1:  {warren.AttemptCompleted},
		5:  {warren.AttemptFailed},
		7:  {warren.AttemptRetried, warren.AttemptRetried, warren.AttemptFailed},
		10: {warren.AttemptRetried, warren.AttemptCompleted},
	}
	require.Eventually(t, func() bool {
		for id, w := range want {
			if len(outcomes(id)) != len(w) {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond)
	for id, w := range want {
		require.Equal(t, w, outcomes(id), "task %d", id)
	}

	as, err := b.store.TaskAttempts(ctx, job.ID, 7)
	require.NoError(t, err)
	for i, a := range as {
		require.Equal(t, i+1, a.Attempt)
		require.NotEmpty(t, a.Worker)
		require.NotNil(t, a.StartedAt, "attempt %d", a.Attempt)
		require.Contains(t, a.Error, "task 7 always panics")
		require.Contains(t, a.Traceback, "panic: task 7 always panics", "attempt %d", a.Attempt)
		require.Contains(t, a.Traceback, "goroutine ", "attempt %d: a Go stack", a.Attempt)
	}
	as, err = b.store.TaskAttempts(ctx, job.ID, 10)
	require.NoError(t, err)
	require.Contains(t, as[0].Error, "transient: try again")
	require.Empty(t, as[0].Traceback, "an error without a stack has no traceback")
	require.Empty(t, as[1].Error)
}
