package storetest

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

func testTaskTimeout(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("RoundTrips", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		policy := warren.Policy{Reduce: "collect", MaxRetries: 2, TaskTimeout: 90 * time.Second, BatchSize: 1}
		job := createJob(t, s, store.NewJob{Policy: policy}, 1)
		require.Equal(t, policy, job.Policy)
		require.Equal(t, policy, getJob(t, s, job.ID).Policy)
		jobs, _, err := s.ListJobs(t.Context(), store.ListJobsOpts{})
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		require.Equal(t, policy, jobs[0].Policy)
	})

	t.Run("ZeroStaysZero", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 1)
		require.Zero(t, getJob(t, s, job.ID).Policy.TaskTimeout, "the default is applied when it is used, not stored")
	})
}

func testRedriveJob(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("FailedJob", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{Reduce: "collect", MaxRetries: 3}}, 4)
		relayAll(t, s)
		started := time.Now().Add(-time.Minute)
		second := failed(job.ID, 2, "boom 2")
		second.StartedAt = &started
		third := failed(job.ID, 3, "boom 3")
		third.Attempts = 2
		report := apply(t, s, completed(job.ID, 1, `1`), second, third, completed(job.ID, 4, `4`))
		require.Equal(t, []string{job.ID}, report.ReadyToClose)
		finish(t, s, job.ID, warren.JobFailed, nil, "2 of 4 tasks failed")

		redriven, n, err := s.RedriveJob(t.Context(), job.ID)
		require.NoError(t, err)
		require.Equal(t, 2, n, "the failed tasks are requeued")
		require.Equal(t, warren.JobRunning, redriven.State)
		require.Equal(t, int64(2), redriven.CompletedTasks)
		require.Zero(t, redriven.FailedTasks)
		require.Equal(t, int64(2), redriven.PendingTasks())
		require.Nil(t, redriven.FinishedAt)
		require.Empty(t, redriven.Error)
		require.Empty(t, redriven.ResultLocation)
		requireSameJob(t, redriven, getJob(t, s, job.ID))

		require.Equal(t, []warren.TaskState{warren.TaskCompleted, warren.TaskPending, warren.TaskPending, warren.TaskCompleted},
			taskStates(t, s, job.ID))
		pending := allTasks(t, s, job.ID, warren.TaskPending)
		require.Equal(t, []int{4, 2}, []int{pending[0].Attempts, pending[1].Attempts}, "attempts are kept")
		for _, task := range pending {
			require.Empty(t, task.Error)
			require.Empty(t, task.Result)
			require.Nil(t, task.StartedAt)
			require.Nil(t, task.FinishedAt)
		}
		errs, err := s.JobErrors(t.Context(), job.ID, 10)
		require.NoError(t, err)
		require.Empty(t, errs)
		backlog, err := s.Backlog(t.Context())
		require.NoError(t, err)
		require.Equal(t, int64(2), backlog)

		offered := relayAll(t, s)
		require.Equal(t, refs(job.ID, 2, 3), offeredRefs(offered))
		require.Equal(t, 4, offered[0].Attempts, "the count continues")
		require.Equal(t, 2, offered[1].Attempts)
		require.Equal(t, 3, offered[0].MaxRetries)

		report = apply(t, s, completed(job.ID, 2, `2`), completed(job.ID, 3, `3`))
		require.Equal(t, []string{job.ID}, report.ReadyToClose, "the job closes again by the same rules")
		finish(t, s, job.ID, warren.JobCompleted, []byte(`[1, 2, 3, 4]`), "")
		requireResult(t, s, job.ID, `[1, 2, 3, 4]`)
	})

	t.Run("CompletedWithFailures", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{Reduce: "collect", ToleratedFailures: 1, ToleratedFailurePercent: 50}}, 3)
		relayAll(t, s)
		report := apply(t, s, completed(job.ID, 1, `1`), failed(job.ID, 2, "boom"), completed(job.ID, 3, `3`))
		require.Equal(t, []string{job.ID}, report.ReadyToClose)
		finish(t, s, job.ID, warren.JobCompleted, []byte(`[1, null, 3]`), "")
		requireResult(t, s, job.ID, `[1, null, 3]`)

		redriven, n, err := s.RedriveJob(t.Context(), job.ID)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, warren.JobRunning, redriven.State)
		require.Zero(t, redriven.FailedTasks)
		require.Empty(t, redriven.ResultLocation)
		_, err = s.JobResult(t.Context(), job.ID)
		require.ErrorIs(t, err, warren.ErrNotFound, "the old result is gone")

		offered := relayAll(t, s)
		require.Equal(t, refs(job.ID, 2), offeredRefs(offered))
		require.Equal(t, 4, offered[0].Attempts)
		report = apply(t, s, completed(job.ID, 2, `2`))
		require.Equal(t, []string{job.ID}, report.ReadyToClose)
		finish(t, s, job.ID, warren.JobCompleted, []byte(`[1, 2, 3]`), "")
		requireResult(t, s, job.ID, `[1, 2, 3]`)
	})

	t.Run("FailFastRequeuesCancelledTasks", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{FailFast: true, MaxRetries: 3}}, 5)
		relay(t, s, 3)
		report := apply(t, s, completed(job.ID, 1, `1`), failed(job.ID, 2, "boom"))
		require.Equal(t, []string{job.ID}, report.ReadyToClose)
		finish(t, s, job.ID, warren.JobFailed, nil, "failed fast")
		require.Equal(t, []warren.TaskState{warren.TaskCompleted, warren.TaskFailed, warren.TaskCancelled, warren.TaskCancelled, warren.TaskCancelled},
			taskStates(t, s, job.ID))

		redriven, n, err := s.RedriveJob(t.Context(), job.ID)
		require.NoError(t, err)
		require.Equal(t, 4, n, "the failed task and the three tasks that never ran")
		require.Equal(t, int64(1), redriven.CompletedTasks)
		require.Zero(t, redriven.FailedTasks)
		pending := allTasks(t, s, job.ID, warren.TaskPending)
		require.Equal(t, []int64{2, 3, 4, 5}, taskIDs(pending))
		require.Equal(t, int64(len(pending)), redriven.PendingTasks(), "every task is accounted for")
		require.Equal(t, redriven.ExpectedTasks, redriven.CompletedTasks+redriven.FailedTasks+int64(len(pending)))

		offered := relayAll(t, s)
		require.Equal(t, refs(job.ID, 2, 3, 4, 5), offeredRefs(offered))
		require.Equal(t, []int{4, 0, 0, 0}, offeredAttempts(offered))
		report = apply(t, s, completed(job.ID, 2, `2`), completed(job.ID, 3, `3`), completed(job.ID, 4, `4`), completed(job.ID, 5, `5`))
		require.Equal(t, []string{job.ID}, report.ReadyToClose)
		finish(t, s, job.ID, warren.JobCompleted, []byte(`[1, 2, 3, 4, 5]`), "")
	})

	t.Run("ConflictsChangeNothing", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)

		open := newJob(t, s, 2)
		relayAll(t, s)
		apply(t, s, failed(open.ID, 1, "boom"))

		cancelled := newJob(t, s, 2)
		relayAll(t, s)
		apply(t, s, failed(cancelled.ID, 1, "boom"))
		_, err := s.CancelJob(t.Context(), cancelled.ID)
		require.NoError(t, err)

		clean := newJob(t, s, 1)
		relayAll(t, s)
		apply(t, s, completed(clean.ID, 1, `1`))
		finish(t, s, clean.ID, warren.JobCompleted, []byte(`[1]`), "")

		givenUp := newJob(t, s, 2)
		finish(t, s, givenUp.ID, warren.JobFailed, nil, "given up")

		for name, id := range map[string]string{
			"open": open.ID, "cancelled": cancelled.ID, "completed without failures": clean.ID,
			"failed without a failed task": givenUp.ID,
		} {
			job, tasks := getJob(t, s, id), allTasks(t, s, id, "")
			_, n, err := s.RedriveJob(t.Context(), id)
			require.ErrorIs(t, err, warren.ErrConflict, name)
			require.Zero(t, n, name)
			requireSameJob(t, job, getJob(t, s, id))
			require.Equal(t, tasks, allTasks(t, s, id, ""), name)
		}
	})

	t.Run("UnknownJob", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		_, _, err := s.RedriveJob(t.Context(), "no-such-job")
		require.ErrorIs(t, err, warren.ErrNotFound)
	})

	t.Run("ConcurrentRedrivesOneWins", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 3)
		relayAll(t, s)
		apply(t, s, completed(job.ID, 1, `1`), failed(job.ID, 2, "boom"), failed(job.ID, 3, "boom"))
		finish(t, s, job.ID, warren.JobFailed, nil, "2 of 3 tasks failed")

		const callers = 6
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			ns    = make([]int, callers)
			errs  = make([]error, callers)
		)
		for i := range callers {
			wg.Go(func() {
				<-start
				_, ns[i], errs[i] = s.RedriveJob(t.Context(), job.ID)
			})
		}
		close(start)
		wg.Wait()
		winners := 0
		for i := range callers {
			if errs[i] == nil {
				winners++
				require.Equal(t, 2, ns[i])
				continue
			}
			require.ErrorIs(t, errs[i], warren.ErrConflict)
		}
		require.Equal(t, 1, winners)
		got := getJob(t, s, job.ID)
		require.Zero(t, got.FailedTasks, "the counter dropped once")
		require.Equal(t, int64(2), got.PendingTasks())
		require.Equal(t, refs(job.ID, 2, 3), offeredRefs(relayAll(t, s)))
	})
}

func testReopenTask(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("FailedTaskOfOpenJob", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 3)
		relayAll(t, s)
		queuedBefore := *task(t, s, job.ID, 2).QueuedAt
		started := time.Now().Add(-time.Minute)
		broken := failed(job.ID, 2, "boom")
		broken.StartedAt = &started
		apply(t, s, broken)

		_, ok, err := s.ReopenTask(t.Context(), job.ID, 2)
		require.NoError(t, err)
		require.True(t, ok)
		reopened := task(t, s, job.ID, 2)
		require.Equal(t, warren.TaskQueued, reopened.State)
		require.Zero(t, reopened.Attempts, "a replay resets the attempts (docs/failures.md)")
		require.Empty(t, reopened.Error)
		require.Empty(t, reopened.Result)
		require.Nil(t, reopened.StartedAt)
		require.Nil(t, reopened.FinishedAt)
		requireRecent(t, reopened.QueuedAt, "QueuedAt")
		require.False(t, reopened.QueuedAt.Before(queuedBefore), "queued_at is the replay's")
		got := getJob(t, s, job.ID)
		require.Equal(t, warren.JobRunning, got.State)
		require.Zero(t, got.FailedTasks)
		require.Empty(t, relay(t, s, 10), "the replay publishes the task itself")

		_, ok, err = s.ReopenTask(t.Context(), job.ID, 2)
		require.NoError(t, err)
		require.False(t, ok, "a queued task is not failed")
		requireSameJob(t, got, getJob(t, s, job.ID))

		report := apply(t, s, completed(job.ID, 1, `1`), completed(job.ID, 2, `2`), completed(job.ID, 3, `3`))
		require.Equal(t, []string{job.ID}, report.ReadyToClose)
	})

	t.Run("FailedTaskOfFailedJob", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 2)
		relayAll(t, s)
		apply(t, s, completed(job.ID, 1, `1`), failed(job.ID, 2, "boom"))
		finish(t, s, job.ID, warren.JobFailed, nil, "1 of 2 tasks failed")

		_, ok, err := s.ReopenTask(t.Context(), job.ID, 2)
		require.NoError(t, err)
		require.True(t, ok)
		got := getJob(t, s, job.ID)
		require.Equal(t, warren.JobRunning, got.State)
		require.Zero(t, got.FailedTasks)
		require.Nil(t, got.FinishedAt)
		require.Empty(t, got.Error)
		require.Equal(t, warren.TaskQueued, task(t, s, job.ID, 2).State)

		report := apply(t, s, completed(job.ID, 2, `2`))
		require.Equal(t, []string{job.ID}, report.ReadyToClose)
		finish(t, s, job.ID, warren.JobCompleted, []byte(`[1, 2]`), "")
		requireResult(t, s, job.ID, `[1, 2]`)
	})

	t.Run("FailedTaskOfCompletedJobClearsResult", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{ToleratedFailures: 1, ToleratedFailurePercent: 50}}, 2)
		relayAll(t, s)
		apply(t, s, completed(job.ID, 1, `1`), failed(job.ID, 2, "boom"))
		finish(t, s, job.ID, warren.JobCompleted, []byte(`[1, null]`), "")

		_, ok, err := s.ReopenTask(t.Context(), job.ID, 2)
		require.NoError(t, err)
		require.True(t, ok)
		got := getJob(t, s, job.ID)
		require.Equal(t, warren.JobRunning, got.State)
		require.Empty(t, got.ResultLocation)
		_, err = s.JobResult(t.Context(), job.ID)
		require.ErrorIs(t, err, warren.ErrNotFound)
	})

	// A fail-fast job's cancelled tasks never ran: reopening the job
	// requeues them, or it could never close again.
	t.Run("FailFastJobRequeuesCancelledTasks", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{FailFast: true}}, 4)
		relayAll(t, s)
		apply(t, s, completed(job.ID, 1, `1`), failed(job.ID, 2, "boom"))
		finish(t, s, job.ID, warren.JobFailed, nil, "failed fast")

		_, ok, err := s.ReopenTask(t.Context(), job.ID, 2)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, []warren.TaskState{warren.TaskCompleted, warren.TaskQueued, warren.TaskPending, warren.TaskPending},
			taskStates(t, s, job.ID))
		require.Equal(t, refs(job.ID, 3, 4), offeredRefs(relayAll(t, s)))
		report := apply(t, s, completed(job.ID, 2, `2`), completed(job.ID, 3, `3`), completed(job.ID, 4, `4`))
		require.Equal(t, []string{job.ID}, report.ReadyToClose)
	})

	t.Run("NotFailedChangesNothing", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 3)
		relay(t, s, 2)
		apply(t, s, completed(job.ID, 1, `1`))
		before, tasks := getJob(t, s, job.ID), allTasks(t, s, job.ID, "")

		for id, state := range map[int64]string{1: "completed", 2: "queued", 3: "pending"} {
			_, ok, err := s.ReopenTask(t.Context(), job.ID, id)
			require.NoError(t, err, state)
			require.False(t, ok, state)
		}
		requireSameJob(t, before, getJob(t, s, job.ID))
		require.Equal(t, tasks, allTasks(t, s, job.ID, ""))
	})

	t.Run("CancelledJobChangesNothing", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 2)
		relayAll(t, s)
		apply(t, s, failed(job.ID, 1, "boom"))
		_, err := s.CancelJob(t.Context(), job.ID)
		require.NoError(t, err)
		before, tasks := getJob(t, s, job.ID), allTasks(t, s, job.ID, "")

		_, ok, err := s.ReopenTask(t.Context(), job.ID, 1)
		require.NoError(t, err)
		require.False(t, ok)
		requireSameJob(t, before, getJob(t, s, job.ID))
		require.Equal(t, tasks, allTasks(t, s, job.ID, ""))
	})

	t.Run("Unknown", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 2)
		_, _, err := s.ReopenTask(t.Context(), "no-such-job", 1)
		require.ErrorIs(t, err, warren.ErrNotFound)
		_, _, err = s.ReopenTask(t.Context(), job.ID, 3)
		require.ErrorIs(t, err, warren.ErrNotFound, "task ids are 1..2")
	})
}

func testReconcileStale(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("RequeuesThenFailsAsLost", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxRetries: 2}}, 3)
		relayAll(t, s)
		apply(t, s, completed(job.ID, 1, `1`))
		done := task(t, s, job.ID, 1)

		requireReconciled(t, reconcile(t, s, time.Now().Add(30*time.Minute), 100), 0, 0, nil,
			"nothing is stale within the default hour")

		// Each lost run counts: attempts 1 and 2 are within max_retries 2.
		for attempt := 1; attempt <= 2; attempt++ {
			requireReconciled(t, reconcile(t, s, time.Now().Add(2*time.Hour), 100), 2, 0, nil)
			for _, tk := range allTasks(t, s, job.ID, warren.TaskPending) {
				require.Equal(t, attempt, tk.Attempts)
			}
			backlog, err := s.Backlog(t.Context())
			require.NoError(t, err)
			require.Equal(t, int64(2), backlog, "requeued tasks are in the outbox")
			offered := relayAll(t, s)
			require.Equal(t, refs(job.ID, 2, 3), offeredRefs(offered))
			require.Equal(t, []int{attempt, attempt}, offeredAttempts(offered))
		}

		now := time.Now().Add(2 * time.Hour)
		report := reconcile(t, s, now, 100)
		requireReconciled(t, report, 0, 2, []string{job.ID})
		for _, tk := range allTasks(t, s, job.ID, warren.TaskFailed) {
			require.Equal(t, 3, tk.Attempts)
			require.Equal(t, store.LostError, tk.Error)
			requireSameTime(t, &now, tk.FinishedAt, "FinishedAt")
		}
		require.Equal(t, done, task(t, s, job.ID, 1), "a finished task is never touched")
		got := getJob(t, s, job.ID)
		require.Equal(t, warren.JobRunning, got.State, "closing is the caller's")
		require.Equal(t, int64(1), got.CompletedTasks)
		require.Equal(t, int64(2), got.FailedTasks)
		toClose, err := s.JobsToClose(t.Context(), 10)
		require.NoError(t, err)
		require.Equal(t, []string{job.ID}, toClose)
		errs, err := s.JobErrors(t.Context(), job.ID, 10)
		require.NoError(t, err)
		require.Equal(t, []warren.TaskError{{TaskID: 2, Error: store.LostError}, {TaskID: 3, Error: store.LostError}}, errs)

		requireReconciled(t, reconcile(t, s, time.Now().Add(2*time.Hour), 100), 0, 0, nil, "failed tasks are terminal")
	})

	t.Run("FailFastReadyAtFirstLoss", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{FailFast: true}}, 3)
		relayAll(t, s)
		now := time.Now().Add(2 * time.Hour)

		requireReconciled(t, reconcile(t, s, now, 1), 0, 1, []string{job.ID})
		requireReconciled(t, reconcile(t, s, now, 10), 0, 2, nil, "a job is listed once, when it becomes ready")
		require.Equal(t, int64(3), getJob(t, s, job.ID).FailedTasks)
	})

	t.Run("NeverTouchesClosedJobsOrUnqueuedTasks", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		open := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxRetries: 1}}, 4)
		closed := newJob(t, s, 2)
		cancelled := newJob(t, s, 2)
		relayAll(t, s)
		unpublished := newJob(t, s, 2)
		apply(t, s, completed(open.ID, 1, `1`), failed(open.ID, 2, "boom"))
		finish(t, s, closed.ID, warren.JobFailed, nil, "given up")
		_, err := s.CancelJob(t.Context(), cancelled.ID)
		require.NoError(t, err)
		untouched := map[string][]warren.TaskRecord{}
		for _, id := range []string{closed.ID, cancelled.ID, unpublished.ID} {
			untouched[id] = allTasks(t, s, id, "")
		}
		finished := allTasks(t, s, open.ID, "")[:2]

		requireReconciled(t, reconcile(t, s, time.Now().Add(2*time.Hour), 100), 2, 0, nil)
		require.Equal(t, []warren.TaskState{warren.TaskCompleted, warren.TaskFailed, warren.TaskPending, warren.TaskPending},
			taskStates(t, s, open.ID))
		require.Equal(t, finished, allTasks(t, s, open.ID, "")[:2])
		for id, tasks := range untouched {
			require.Equal(t, tasks, allTasks(t, s, id, ""))
		}
	})

	t.Run("HonoursEachJobsTimeout", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		short := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxRetries: 3, TaskTimeout: time.Second}}, 2)
		long := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxRetries: 3}}, 2)
		halfHour := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxRetries: 3, TaskTimeout: 30 * time.Minute}}, 1)
		relayAll(t, s)

		requireReconciled(t, reconcile(t, s, time.Now().Add(10*time.Second), 100), 2, 0, nil)
		require.Equal(t, repeat(warren.TaskPending, 2), taskStates(t, s, short.ID))
		require.Equal(t, repeat(warren.TaskQueued, 2), taskStates(t, s, long.ID), "the default hour has not passed")
		require.Equal(t, repeat(warren.TaskQueued, 1), taskStates(t, s, halfHour.ID))

		requireReconciled(t, reconcile(t, s, time.Now().Add(45*time.Minute), 100), 1, 0, nil)
		require.Equal(t, repeat(warren.TaskPending, 1), taskStates(t, s, halfHour.ID))
		require.Equal(t, repeat(warren.TaskQueued, 2), taskStates(t, s, long.ID))

		requireReconciled(t, reconcile(t, s, time.Now().Add(61*time.Minute), 100), 2, 0, nil)
		require.Equal(t, repeat(warren.TaskPending, 2), taskStates(t, s, long.ID))
	})

	// The timeout counts from the last publish: the relay's mark of a
	// requeued task sets a new queued_at, so the task is not stale again
	// at once.
	t.Run("RelayMarkRenewsQueuedAt", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxRetries: 3, TaskTimeout: time.Second}}, 1)
		relayAll(t, s)
		first := *task(t, s, job.ID, 1).QueuedAt

		requireReconciled(t, reconcile(t, s, first.Add(time.Second), 10), 0, 0, nil, "exactly the timeout is not more than it")
		requireReconciled(t, reconcile(t, s, first.Add(time.Second+time.Microsecond), 10), 1, 0, nil)
		require.Equal(t, refs(job.ID, 1), offeredRefs(relayAll(t, s)))
		second := *task(t, s, job.ID, 1).QueuedAt
		require.True(t, second.After(first), "queued_at %v is the new publish's, not %v", second, first)

		requireReconciled(t, reconcile(t, s, second.Add(time.Second), 10), 0, 0, nil, "not stale again at once")
		requireReconciled(t, reconcile(t, s, second.Add(time.Second+time.Microsecond), 10), 1, 0, nil)
		require.Equal(t, 2, task(t, s, job.ID, 1).Attempts)
	})

	// A task queued long ago is not stale while the busy time (a task
	// message seen waiting in the queues) is within its job's timeout:
	// its message may have waited behind a backlog until then.
	t.Run("BusyTimeHoldsBackStaleTasks", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxRetries: 3, TaskTimeout: time.Second}}, 2)
		relayAll(t, s)
		queued := *task(t, s, job.ID, 2).QueuedAt
		now := queued.Add(time.Hour)

		requireReconciled(t, reconcileAt(t, s, store.Staleness{Now: now, Busy: now.Add(-time.Second)}, 10), 0, 0, nil,
			"busy exactly the timeout before now is not more than it")
		require.Equal(t, repeat(warren.TaskQueued, 2), taskStates(t, s, job.ID))
		requireReconciled(t, reconcileAt(t, s, store.Staleness{Now: now, Busy: now.Add(-time.Second - time.Microsecond)}, 10), 2, 0, nil)
		for _, tk := range allTasks(t, s, job.ID, "") {
			require.Equal(t, 1, tk.Attempts, "task %d handled once", tk.TaskID)
		}
	})

	t.Run("BusyTimeMeetsEachJobsTimeout", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		short := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxRetries: 3, TaskTimeout: time.Second}}, 2)
		long := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxRetries: 3}}, 2)
		relayAll(t, s)
		now := time.Now().Add(3 * time.Hour)

		requireReconciled(t, reconcileAt(t, s, store.Staleness{Now: now, Busy: now.Add(-10 * time.Minute)}, 10), 2, 0, nil)
		require.Equal(t, repeat(warren.TaskPending, 2), taskStates(t, s, short.ID), "busy 10 min ago: past a timeout of 1 s")
		require.Equal(t, repeat(warren.TaskQueued, 2), taskStates(t, s, long.ID), "busy 10 min ago: within the default hour")

		requireReconciled(t, reconcileAt(t, s, store.Staleness{Now: now, Busy: now.Add(-61 * time.Minute)}, 10), 2, 0, nil)
		require.Equal(t, repeat(warren.TaskPending, 2), taskStates(t, s, long.ID))
	})

	// Grace is added to every job's timeout, and lost tasks fail at Now.
	t.Run("GraceExtendsTheTimeout", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxRetries: 0, TaskTimeout: time.Second}}, 1)
		relayAll(t, s)
		queued := *task(t, s, job.ID, 1).QueuedAt
		grace := time.Minute

		requireReconciled(t, reconcileAt(t, s, store.Staleness{Now: queued.Add(time.Second + grace), Grace: grace}, 10), 0, 0, nil,
			"exactly the timeout plus the grace is not more than it")
		now := queued.Add(time.Second + grace + time.Microsecond)
		requireReconciled(t, reconcileAt(t, s, store.Staleness{Now: now, Grace: grace}, 10), 0, 1, []string{job.ID})
		failed := task(t, s, job.ID, 1)
		require.Equal(t, store.LostError, failed.Error)
		requireSameTime(t, &now, failed.FinishedAt, "FinishedAt is Now, not the cutoff")
	})

	t.Run("HonoursLimit", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxRetries: 3}}, 5)
		relayAll(t, s)
		now := time.Now().Add(2 * time.Hour)

		for _, want := range []int{2, 2, 1, 0} {
			requireReconciled(t, reconcile(t, s, now, 2), want, 0, nil)
		}
		for _, tk := range allTasks(t, s, job.ID, "") {
			require.Equal(t, warren.TaskPending, tk.State)
			require.Equal(t, 1, tk.Attempts, "task %d handled once", tk.TaskID)
		}
	})

	t.Run("ConcurrentCallsHandleEachTaskOnce", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		const retried, lost, callers = 60, 40, 6
		requeue := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxRetries: 3}}, retried)
		fail := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxRetries: 0}}, lost)
		relayAll(t, s)
		now := time.Now().Add(2 * time.Hour)

		var (
			mu    sync.Mutex
			total store.ReconcileReport
			wg    sync.WaitGroup
			start = make(chan struct{})
			errs  = make([]error, callers)
		)
		for i := range callers {
			wg.Go(func() {
				<-start
				for {
					r, err := s.ReconcileStale(t.Context(), store.Staleness{Now: now}, 7)
					if err != nil {
						errs[i] = err
						return
					}
					if r.Requeued+r.Failed == 0 {
						return
					}
					mu.Lock()
					total.Requeued += r.Requeued
					total.Failed += r.Failed
					total.ReadyToClose = append(total.ReadyToClose, r.ReadyToClose...)
					mu.Unlock()
				}
			})
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		require.Equal(t, retried, total.Requeued)
		require.Equal(t, lost, total.Failed)
		require.Equal(t, []string{fail.ID}, total.ReadyToClose, "listed once")
		requireReconciled(t, reconcile(t, s, now, 100), 0, 0, nil)
		for _, tk := range allTasks(t, s, requeue.ID, "") {
			require.Equal(t, warren.TaskPending, tk.State)
			require.Equal(t, 1, tk.Attempts, "task %d handled once", tk.TaskID)
		}
		for _, tk := range allTasks(t, s, fail.ID, "") {
			require.Equal(t, warren.TaskFailed, tk.State)
			require.Equal(t, 1, tk.Attempts, "task %d handled once", tk.TaskID)
		}
		require.Equal(t, int64(lost), getJob(t, s, fail.ID).FailedTasks)
		require.Zero(t, getJob(t, s, requeue.ID).FailedTasks)
	})
}

// finish closes job id with FinishJob, which must close it.
func finish(t *testing.T, s store.Store, id string, state warren.JobState, result []byte, errMsg string) {
	t.Helper()
	ok, err := s.FinishJob(t.Context(), id, getJob(t, s, id).Version, state, result, errMsg)
	require.NoError(t, err)
	require.True(t, ok, "FinishJob closes job %s", id)
}

// requireResult fails unless job id's stored result is want.
func requireResult(t *testing.T, s store.Store, id, want string) {
	t.Helper()
	result, err := s.JobResult(t.Context(), id)
	require.NoError(t, err)
	require.JSONEq(t, want, string(result))
}

// task returns task taskID of job jobID.
func task(t *testing.T, s store.Store, jobID string, taskID int64) warren.TaskRecord {
	t.Helper()
	tasks := allTasks(t, s, jobID, "")
	i := slices.IndexFunc(tasks, func(task warren.TaskRecord) bool { return task.TaskID == taskID })
	require.GreaterOrEqual(t, i, 0, "task %d of job %s", taskID, jobID)
	return tasks[i]
}

// offeredAttempts lists the Attempts of tasks.
func offeredAttempts(tasks []store.OutboxTask) []int {
	attempts := make([]int, len(tasks))
	for i, task := range tasks {
		attempts[i] = task.Attempts
	}
	return attempts
}

// reconcile runs ReconcileStale at now, with no busy time and no grace:
// each task's queued_at alone counts.
func reconcile(t *testing.T, s store.Store, now time.Time, limit int) store.ReconcileReport {
	t.Helper()
	return reconcileAt(t, s, store.Staleness{Now: now}, limit)
}

// reconcileAt runs ReconcileStale at at.
func reconcileAt(t *testing.T, s store.Store, at store.Staleness, limit int) store.ReconcileReport {
	t.Helper()
	report, err := s.ReconcileStale(t.Context(), at, limit)
	require.NoError(t, err)
	return report
}

// requireReconciled fails unless report requeued and failed as many tasks
// and lists exactly the jobs of ready (nil for none).
func requireReconciled(t *testing.T, report store.ReconcileReport, requeued, failed int, ready []string, msgAndArgs ...any) {
	t.Helper()
	got := store.ReconcileReport{Requeued: report.Requeued, Failed: report.Failed}
	if len(report.ReadyToClose) > 0 {
		got.ReadyToClose = report.ReadyToClose
	}
	require.Equal(t, store.ReconcileReport{Requeued: requeued, Failed: failed, ReadyToClose: ready}, got, msgAndArgs...)
}
