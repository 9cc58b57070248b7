package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// testStale pins what the stale selection's one SQL statement must do
// (the rest of its rule: testReconcileStale), and that the times the
// store writes and the time it tells (Store.Now) are one clock.
func testStale(t *testing.T, newStore func(t *testing.T) store.Store) {
	// The oldest publish goes first, not the lowest task id: a task
	// requeued and published again waits behind one published before it.
	t.Run("OldestPublishFirst", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxRetries: 5, TaskTimeout: time.Second}}, 2)
		require.Equal(t, refs(job.ID, 1), offeredRefs(relay(t, s, 1)))
		require.Equal(t, refs(job.ID, 2), offeredRefs(relay(t, s, 1)))
		first, second := *task(t, s, job.ID, 1).QueuedAt, *task(t, s, job.ID, 2).QueuedAt
		require.True(t, first.Before(second), "task 1 was published first")

		requireReconciled(t, reconcile(t, s, second.Add(2*time.Second), 1), 1, 0, nil)
		require.Equal(t, warren.TaskPending, task(t, s, job.ID, 1).State, "the oldest publish, task 1's, went first")
		require.Equal(t, refs(job.ID, 1), offeredRefs(relay(t, s, 1)))
		third := *task(t, s, job.ID, 1).QueuedAt
		require.True(t, second.Before(third), "task 1 was published again after task 2")

		requireReconciled(t, reconcile(t, s, third.Add(2*time.Second), 1), 1, 0, nil)
		require.Equal(t, warren.TaskPending, task(t, s, job.ID, 2).State, "task 2's publish is now the oldest")
		require.Equal(t, warren.TaskQueued, task(t, s, job.ID, 1).State)
	})

	// The store writes its times from the clock it tells: a time read
	// from Store.Now before a write is not after the time written, and one
	// read after it is not before. Callers that pass times to compare with
	// stored ones (Staleness, Expiry, DeliveryClaim) rely on it.
	t.Run("WritesItsOwnClock", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		now := func() time.Time {
			t.Helper()
			at, err := s.Now(t.Context())
			require.NoError(t, err)
			return at
		}
		requireBetween := func(before, at, after time.Time, name string) {
			t.Helper()
			require.False(t, at.Before(before), "%s %v is before %v", name, at, before)
			require.False(t, at.After(after), "%s %v is after %v", name, at, after)
		}

		before := now()
		job := newJob(t, s, 1)
		after := now()
		requireBetween(before, job.CreatedAt, after, "created_at")

		before = now()
		relayAll(t, s)
		after = now()
		requireBetween(before, *task(t, s, job.ID, 1).QueuedAt, after, "queued_at")

		before = now()
		cancelled, err := s.CancelJob(t.Context(), job.ID)
		require.NoError(t, err)
		after = now()
		requireBetween(before, *cancelled.FinishedAt, after, "finished_at")
		require.False(t, now().Before(after), "the clock does not go back")
	})
}
