package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// testPause pins pausing and resuming jobs and work queues: a paused job
// or queue is not relayed, its queued tasks are never lost to the
// reconciler, and after a resume their timeouts count from the resume.
func testPause(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("JobIsNotRelayedUntilResumed", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		paused, other := newJob(t, s, 3), newJob(t, s, 2)
		before := storeNow(t, s)
		got, err := s.PauseJob(t.Context(), paused.ID)
		require.NoError(t, err)
		require.NotNil(t, got.PausedAt, "the answer shows the pause")
		require.False(t, got.PausedAt.Before(before), "paused_at is the store's clock")
		require.Equal(t, paused.Version, got.Version, "a pause moves no version: a close computed meanwhile still applies")
		stored := getJob(t, s, paused.ID)
		require.True(t, stored.Paused())
		requireSameTime(t, got.PausedAt, stored.PausedAt, "paused_at")

		again, err := s.PauseJob(t.Context(), paused.ID)
		require.NoError(t, err)
		requireSameTime(t, got.PausedAt, again.PausedAt, "a second pause keeps the first paused_at")

		require.Equal(t, refs(other.ID, 1, 2), offeredRefs(relayAll(t, s)), "only the job that is not paused is relayed")
		require.Equal(t, warren.JobPending, getJob(t, s, paused.ID).State, "a paused job keeps its state")
		ids, err := s.PausedJobs(t.Context(), 0)
		require.NoError(t, err)
		require.Equal(t, []string{paused.ID}, ids)

		resumed, err := s.ResumeJob(t.Context(), paused.ID)
		require.NoError(t, err)
		require.Nil(t, resumed.PausedAt)
		require.False(t, getJob(t, s, paused.ID).Paused())
		require.Equal(t, refs(paused.ID, 1, 2, 3), offeredRefs(relayAll(t, s)), "a resumed job is relayed again")
		ids, err = s.PausedJobs(t.Context(), 0)
		require.NoError(t, err)
		require.Empty(t, ids)

		again, err = s.ResumeJob(t.Context(), paused.ID)
		require.NoError(t, err, "resuming a job that is not paused changes nothing")
		require.Nil(t, again.PausedAt)
	})

	t.Run("ClosedOrUnknownJob", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 1)
		_, err := s.CancelJob(t.Context(), job.ID)
		require.NoError(t, err)
		_, err = s.PauseJob(t.Context(), job.ID)
		require.ErrorIs(t, err, warren.ErrConflict)
		_, err = s.ResumeJob(t.Context(), job.ID)
		require.ErrorIs(t, err, warren.ErrConflict)
		_, err = s.PauseJob(t.Context(), "no-such-job")
		require.ErrorIs(t, err, warren.ErrNotFound)
		_, err = s.ResumeJob(t.Context(), "no-such-job")
		require.ErrorIs(t, err, warren.ErrNotFound)
	})

	// A paused job's tasks still finish: the outcomes of runs that were
	// under way count, and the job closes when they finish its work.
	t.Run("RunningTasksStillCount", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 2)
		relayAll(t, s)
		_, err := s.PauseJob(t.Context(), job.ID)
		require.NoError(t, err)
		report := apply(t, s, completed(job.ID, 1, `1`), completed(job.ID, 2, `2`))
		require.Equal(t, []string{job.ID}, report.ReadyToClose)
		got := getJob(t, s, job.ID)
		require.Equal(t, int64(2), got.CompletedTasks)
		closed, err := s.FinishJob(t.Context(), job.ID, got.Version, warren.JobCompleted, nil, "")
		require.NoError(t, err)
		require.True(t, closed, "a paused job closes when its work is done")
		require.False(t, getJob(t, s, job.ID).Paused(), "a closed job is not paused")
	})

	// A redrive reopens a job that closed while paused without its pause.
	t.Run("RedriveReopensUnpaused", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 1)
		relayAll(t, s)
		_, err := s.PauseJob(t.Context(), job.ID)
		require.NoError(t, err)
		apply(t, s, failed(job.ID, 1, "boom"))
		got := getJob(t, s, job.ID)
		closed, err := s.FinishJob(t.Context(), job.ID, got.Version, warren.JobFailed, nil, "failed")
		require.NoError(t, err)
		require.True(t, closed)
		reopened, _, err := s.RedriveJob(t.Context(), job.ID)
		require.NoError(t, err)
		require.False(t, reopened.Paused())
		require.Equal(t, refs(job.ID, 1), offeredRefs(relayAll(t, s)), "the redriven task is relayed")
	})

	t.Run("QueueIsNotRelayedUntilResumed", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		inQ := createJob(t, s, store.NewJob{Policy: warren.Policy{Queue: "q1"}}, 2)
		inDefault := newJob(t, s, 1)
		p, err := s.PauseQueue(t.Context(), "q1")
		require.NoError(t, err)
		require.Equal(t, "q1", p.Queue)
		again, err := s.PauseQueue(t.Context(), "q1")
		require.NoError(t, err)
		require.True(t, p.PausedAt.Equal(again.PausedAt), "a second pause keeps the first paused_at")
		later := createJob(t, s, store.NewJob{Policy: warren.Policy{Queue: "q1"}}, 1)
		require.Equal(t, refs(inDefault.ID, 1), offeredRefs(relayAll(t, s)), "nothing of the paused queue is relayed, jobs submitted since included")
		require.False(t, getJob(t, s, inQ.ID).Paused(), "a queue pause is the queue's, not its jobs'")

		queues, err := s.PausedQueues(t.Context())
		require.NoError(t, err)
		require.Len(t, queues, 1)
		require.Equal(t, "q1", queues[0].Queue)
		require.True(t, p.PausedAt.Equal(queues[0].PausedAt))

		was, err := s.ResumeQueue(t.Context(), "q1")
		require.NoError(t, err)
		require.True(t, was)
		require.ElementsMatch(t, append(refs(inQ.ID, 1, 2), refs(later.ID, 1)...), offeredRefs(relayAll(t, s)))
		was, err = s.ResumeQueue(t.Context(), "q1")
		require.NoError(t, err)
		require.False(t, was, "a queue that is not paused")
		queues, err = s.PausedQueues(t.Context())
		require.NoError(t, err)
		require.Empty(t, queues)

		_, err = s.PauseQueue(t.Context(), string(make([]byte, 300)))
		require.Error(t, err, "an invalid queue name")
	})

	// The default queue is paused by its name, and holds the jobs that
	// name no queue.
	t.Run("DefaultQueue", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 1)
		named := createJob(t, s, store.NewJob{Policy: warren.Policy{Queue: "other"}}, 1)
		p, err := s.PauseQueue(t.Context(), "")
		require.NoError(t, err)
		require.Equal(t, "default", p.Queue)
		require.Equal(t, refs(named.ID, 1), offeredRefs(relayAll(t, s)))
		_, err = s.ResumeQueue(t.Context(), "default")
		require.NoError(t, err)
		require.Equal(t, refs(job.ID, 1), offeredRefs(relayAll(t, s)))
	})

	// A queued task of a paused job, or of a paused queue, is never lost,
	// however long ago it was published; after the resume its timeout
	// counts from the resume.
	t.Run("NotStaleWhilePausedTimedFromResume", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		timeout := time.Second
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxRetries: 5, TaskTimeout: timeout}}, 1)
		queued := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxRetries: 5, TaskTimeout: timeout, Queue: "held"}}, 1)
		relayAll(t, s)
		published := *task(t, s, job.ID, 1).QueuedAt
		_, err := s.PauseJob(t.Context(), job.ID)
		require.NoError(t, err)
		_, err = s.PauseQueue(t.Context(), "held")
		require.NoError(t, err)
		requireReconciled(t, reconcile(t, s, published.Add(time.Hour), 10), 0, 0, nil, "nothing paused is lost")

		// The resume is at least 10 ms after the publish, so a pass
		// between the publish's timeout and the resume's tells them apart.
		for !storeNow(t, s).After(published.Add(10 * time.Millisecond)) {
			waitAMoment(t.Context())
		}
		resumeFrom := storeNow(t, s)
		_, err = s.ResumeJob(t.Context(), job.ID)
		require.NoError(t, err)
		_, err = s.ResumeQueue(t.Context(), "held")
		require.NoError(t, err)
		resumeTo := storeNow(t, s)
		requireReconciled(t, reconcile(t, s, resumeFrom.Add(timeout), 10), 0, 0, nil,
			"past the publish's timeout, not past the resume's")
		requireReconciled(t, reconcile(t, s, resumeTo.Add(timeout+time.Millisecond), 10), 2, 0, nil,
			"past the resume's timeout, both are lost")
		require.Equal(t, warren.TaskPending, task(t, s, queued.ID, 1).State)
	})
}

// waitAMoment yields for about a millisecond while a test waits for the
// store's clock to move past a time it must be after.
func waitAMoment(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(time.Millisecond):
	}
}
