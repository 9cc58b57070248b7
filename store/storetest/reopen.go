package storetest

import (
	"sync"
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

	t.Run("ReopenTasksOfOneDeadLetter", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 4)
		relayAll(t, s)
		apply(t, s, failed(job.ID, 1, "boom"), completed(job.ID, 2, `2`), failed(job.ID, 4, "boom"))
		before := getJob(t, s, job.ID)

		r, err := s.ReopenTasks(t.Context(), job.ID, []int64{4, 9, 2, 1, 3})
		require.NoError(t, err)
		require.Equal(t, job.ID, r.JobID)
		require.Equal(t, []int64{1, 4}, reopenedIDs(r), "the failed ones, in task id order")
		for _, rt := range r.Tasks {
			require.Equal(t, 2, rt.Generation)
			require.Equal(t, warren.TaskFailed, rt.Was.State, "task %d as it was", rt.TaskID)
			require.Equal(t, "boom", rt.Was.Error)
			require.Equal(t, 4, rt.Was.Attempts)
		}
		require.Equal(t, []int64{9}, r.Unknown)
		require.Nil(t, r.Closed, "the job was open")
		got := getJob(t, s, job.ID)
		require.Equal(t, got.Version, r.Version)
		require.Zero(t, got.FailedTasks)
		require.Equal(t, before.CompletedTasks, got.CompletedTasks)
		require.Equal(t, []warren.TaskState{warren.TaskQueued, warren.TaskCompleted, warren.TaskQueued, warren.TaskQueued},
			taskStates(t, s, job.ID))

		_, err = s.ReopenTasks(t.Context(), "no-such-job", []int64{1})
		require.ErrorIs(t, err, warren.ErrNotFound)
	})

	// A replay the broker surely refused is undone whole: the closed job
	// is as it was (but its version), with its result, and the tasks its
	// close cancelled are cancelled again, so nothing of it is published
	// and it does not close a second time.
	for name, closeJob := range map[string]func(t *testing.T, s store.Store) (string, int64){
		"FailedFast":            failedFastJob,
		"CompletedWithAFailure": completedWithAFailure,
	} {
		t.Run("UndoRestoresAClosedJob/"+name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			id, taskID := closeJob(t, s)
			before, tasks := getJob(t, s, id), allTasks(t, s, id, "")
			result, resultErr := s.JobResult(t.Context(), id)

			r, err := s.ReopenTasks(t.Context(), id, []int64{taskID})
			require.NoError(t, err)
			require.Len(t, r.Tasks, 1)
			require.NotNil(t, r.Closed)
			require.Equal(t, warren.JobRunning, getJob(t, s, id).State)

			ok, err := s.UndoReopen(t.Context(), r)
			require.NoError(t, err)
			require.True(t, ok)
			after := getJob(t, s, id)
			require.Greater(t, after.Version, r.Version, "an undo is a change")
			before.Version = after.Version
			requireSameJob(t, before, after)
			require.Equal(t, withoutGenerations(tasks), withoutGenerations(allTasks(t, s, id, "")),
				"as they were, but their generations: a generation is never given back")
			got, err := s.JobResult(t.Context(), id)
			require.Equal(t, resultErr, err)
			require.Equal(t, result, got)
			require.Empty(t, relay(t, s, 100), "nothing of the closed job is published")
			toClose, err := s.JobsToClose(t.Context(), 10)
			require.NoError(t, err)
			require.Empty(t, toClose)

			g, ok, err := s.ReopenTask(t.Context(), id, taskID)
			require.NoError(t, err)
			require.True(t, ok, "a later replay reopens it")
			require.Equal(t, r.Tasks[0].Generation+1, g, "a generation is never given twice")
		})
	}

	t.Run("UndoOfAnOpenJob", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 3)
		relayAll(t, s)
		apply(t, s, failed(job.ID, 1, "boom"), completed(job.ID, 2, `2`))
		before, tasks := getJob(t, s, job.ID), allTasks(t, s, job.ID, "")

		r, err := s.ReopenTasks(t.Context(), job.ID, []int64{1})
		require.NoError(t, err)
		ok, err := s.UndoReopen(t.Context(), r)
		require.NoError(t, err)
		require.True(t, ok)
		after := getJob(t, s, job.ID)
		before.Version = after.Version
		requireSameJob(t, before, after)
		require.Equal(t, withoutGenerations(tasks), withoutGenerations(allTasks(t, s, job.ID, "")),
			"task 3 still queued, task 1 failed as it was, but its generation")
	})

	// Once the job moved (an outcome recorded), or the reopened task did
	// (the reconciler took it for lost), an undo would lose that: it
	// changes nothing.
	t.Run("UndoAfterAMoveChangesNothing", func(t *testing.T) {
		t.Parallel()
		for name, move := range map[string]func(s store.Store, jobID string){
			"an outcome of another task": func(s store.Store, jobID string) { apply(t, s, completed(jobID, 2, `2`)) },
			"the reconciler's requeue": func(s store.Store, _ string) {
				requireReconciled(t, reconcile(t, s, time.Now().Add(2*time.Hour), 100), 2, 0, nil)
			},
		} {
			s := newStore(t)
			job := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxRetries: 3}}, 2)
			relayAll(t, s)
			apply(t, s, failed(job.ID, 1, "boom"))
			r, err := s.ReopenTasks(t.Context(), job.ID, []int64{1})
			require.NoError(t, err, name)
			move(s, job.ID)
			moved, tasks := getJob(t, s, job.ID), allTasks(t, s, job.ID, "")

			ok, err := s.UndoReopen(t.Context(), r)
			require.NoError(t, err, name)
			require.False(t, ok, name)
			requireSameJob(t, moved, getJob(t, s, job.ID))
			require.Equal(t, tasks, allTasks(t, s, job.ID, ""), name)
		}
	})

	t.Run("UndoOfNothingChangesNothing", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 1)
		r, err := s.ReopenTasks(t.Context(), job.ID, []int64{1})
		require.NoError(t, err)
		require.Empty(t, r.Tasks, "a pending task is not failed")
		before := getJob(t, s, job.ID)
		ok, err := s.UndoReopen(t.Context(), r)
		require.NoError(t, err)
		require.True(t, ok)
		requireSameJob(t, before, getJob(t, s, job.ID))
	})

	// Replays of two tasks of one closed job at once: one reopens the
	// job, the other finds it open; each task is reopened once.
	t.Run("ConcurrentReopensOfOneClosedJob", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		const tasks = 6
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxRetries: 3}}, tasks)
		relayAll(t, s)
		var outcomes []store.Outcome
		for id := int64(1); id <= tasks; id++ {
			outcomes = append(outcomes, failed(job.ID, id, "boom"))
		}
		apply(t, s, outcomes...)
		finish(t, s, job.ID, warren.JobFailed, nil, "all failed")

		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			results = make([]store.Reopening, tasks)
			errs    = make([]error, tasks)
		)
		for i := range tasks {
			wg.Go(func() {
				<-start
				results[i], errs[i] = s.ReopenTasks(t.Context(), job.ID, []int64{int64(i + 1)})
			})
		}
		close(start)
		wg.Wait()
		reopenedJob := 0
		for i := range tasks {
			require.NoError(t, errs[i])
			require.Equal(t, []int64{int64(i + 1)}, reopenedIDs(results[i]))
			if results[i].Closed != nil {
				reopenedJob++
			}
		}
		require.Equal(t, 1, reopenedJob, "one of them reopened the job")
		got := getJob(t, s, job.ID)
		require.Equal(t, warren.JobRunning, got.State)
		require.Zero(t, got.FailedTasks)
		require.Equal(t, repeat(warren.TaskQueued, tasks), taskStates(t, s, job.ID))
	})
}

// failedFastJob closes a fail-fast job of 4 tasks as failed after its task
// 1 failed, while task 2 was queued and tasks 3 and 4 were not published:
// the close cancels tasks 2 to 4. It returns the job and its failed task.
func failedFastJob(t *testing.T, s store.Store) (string, int64) {
	t.Helper()
	job := createJob(t, s, store.NewJob{Policy: warren.Policy{FailFast: true, MaxRetries: 3}}, 4)
	relay(t, s, 2)
	report := apply(t, s, failed(job.ID, 1, "boom"))
	require.Equal(t, []string{job.ID}, report.ReadyToClose)
	finish(t, s, job.ID, warren.JobFailed, nil, "failed fast")
	require.Equal(t, []warren.TaskState{warren.TaskFailed, warren.TaskCancelled, warren.TaskCancelled, warren.TaskCancelled},
		taskStates(t, s, job.ID))
	return job.ID, 1
}

// completedWithAFailure closes a job of 2 tasks that tolerates a failure
// as completed, with a reduced result, after its task 2 failed (its run's
// start recorded). It returns the job and its failed task.
func completedWithAFailure(t *testing.T, s store.Store) (string, int64) {
	t.Helper()
	job := createJob(t, s, store.NewJob{Policy: warren.Policy{Reduce: "collect", ToleratedFailures: 1, ToleratedFailurePercent: 50}}, 2)
	relayAll(t, s)
	started := time.Now().Add(-time.Minute)
	broken := failed(job.ID, 2, "boom")
	broken.StartedAt = &started
	apply(t, s, completed(job.ID, 1, `1`), broken)
	finish(t, s, job.ID, warren.JobCompleted, []byte(`[1, null]`), "")
	return job.ID, 2
}

// reopenedIDs lists the task ids r reopened.
func reopenedIDs(r store.Reopening) []int64 {
	ids := make([]int64, len(r.Tasks))
	for i, rt := range r.Tasks {
		ids[i] = rt.TaskID
	}
	return ids
}

// withoutGenerations returns tasks with their generations zeroed, to
// compare tasks an undo put back, which keep the generations the reopen
// gave them.
func withoutGenerations(tasks []warren.TaskRecord) []warren.TaskRecord {
	out := make([]warren.TaskRecord, len(tasks))
	for i, task := range tasks {
		task.Generation = 0
		out[i] = task
	}
	return out
}
