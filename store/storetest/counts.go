package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

func testCounts(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("CountJobsByState", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		counts, err := s.CountJobs(t.Context())
		require.NoError(t, err)
		require.Empty(t, counts)

		newJob(t, s, 2)
		running := newJob(t, s, 1)
		relay(t, s, 3) // the first job's two tasks and the second's one
		cancelled := newJob(t, s, 1)
		_, err = s.CancelJob(t.Context(), cancelled.ID)
		require.NoError(t, err)
		newJob(t, s, 4)
		apply(t, s, completed(running.ID, 1, `1`))
		ok, err := s.FinishJob(t.Context(), running.ID, getJob(t, s, running.ID).Version, warren.JobCompleted, []byte(`[1]`), "")
		require.NoError(t, err)
		require.True(t, ok)

		counts, err = s.CountJobs(t.Context())
		require.NoError(t, err)
		require.Equal(t, map[warren.JobState]int64{
			warren.JobRunning: 1, warren.JobCompleted: 1, warren.JobCancelled: 1, warren.JobPending: 1,
		}, counts)
	})

	t.Run("OpenQueuesAreTheQueuesOfOpenJobs", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		queues, err := s.OpenQueues(t.Context())
		require.NoError(t, err)
		require.Empty(t, queues)

		newJob(t, s, 1)
		createJob(t, s, store.NewJob{Policy: warren.Policy{Queue: "gpu"}}, 1)
		createJob(t, s, store.NewJob{Policy: warren.Policy{Queue: "gpu"}}, 1)
		closed := createJob(t, s, store.NewJob{Policy: warren.Policy{Queue: "io"}}, 1)
		_, err = s.CancelJob(t.Context(), closed.ID)
		require.NoError(t, err)
		queues, err = s.OpenQueues(t.Context())
		require.NoError(t, err)
		require.Equal(t, []string{"default", "gpu"}, queues, "each once, sorted, a closed job's left out")
	})

	t.Run("BacklogIsThePendingTasksOfOpenJobs", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		n, err := s.Backlog(t.Context())
		require.NoError(t, err)
		require.Zero(t, n)

		newJob(t, s, 5)
		relay(t, s, 4)
		cancelled := newJob(t, s, 3)
		newJob(t, s, 2)
		n, err = s.Backlog(t.Context())
		require.NoError(t, err)
		require.Equal(t, int64(6), n, "one task of the first job, three of the second and two of the third")

		_, err = s.CancelJob(t.Context(), cancelled.ID)
		require.NoError(t, err)
		n, err = s.Backlog(t.Context())
		require.NoError(t, err)
		require.Equal(t, int64(3), n, "one task of the first job and two of the third")
	})
}
