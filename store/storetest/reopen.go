package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

func testReopen(t *testing.T, newStore func(t *testing.T) store.Store) {
	// A replay resets the task's retries (docs/failures.md): its message
	// carries x-retry 0, so the store counts its attempts from 0 again,
	// and a replayed run that is lost is retried, then failed as lost
	// once its own retries are spent.
	t.Run("ReplayResetsAttempts", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxRetries: 1}}, 1)
		relayAll(t, s)
		apply(t, s, failed(job.ID, 1, "boom"))
		_, ok, err := s.ReopenTask(t.Context(), job.ID, 1)
		require.NoError(t, err)
		require.True(t, ok)
		require.Zero(t, task(t, s, job.ID, 1).Attempts, "as the replayed message's x-retry 0 says")

		requireReconciled(t, reconcile(t, s, time.Now().Add(2*time.Hour), 10), 1, 0, nil, "the replayed run was its first")
		require.Equal(t, []int{1}, offeredAttempts(relayAll(t, s)))
		requireReconciled(t, reconcile(t, s, time.Now().Add(2*time.Hour), 10), 0, 1, []string{job.ID},
			"the second run since the replay was its last")
	})
}
