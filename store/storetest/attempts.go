package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// retried is the outcome of run attempt of a task that failed with msg
// and is retried (store.Outcome.Retry).
func retried(jobID string, taskID int64, attempt int, msg, traceback string) store.Outcome {
	started := time.Now().Add(-time.Second).UTC().Truncate(time.Millisecond)
	return store.Outcome{JobID: jobID, TaskID: taskID, State: warren.TaskFailed, Retry: true, Error: msg,
		Traceback: traceback, Attempts: attempt, Worker: "w-retry", StartedAt: &started}
}

// attempts returns the attempts the store kept of a task.
func attempts(t *testing.T, s store.Store, jobID string, taskID int64) []warren.TaskAttempt {
	t.Helper()
	got, err := s.TaskAttempts(t.Context(), jobID, taskID)
	require.NoError(t, err)
	return got
}

// numbers returns the attempt numbers of as, in order.
func numbers(as []warren.TaskAttempt) []int {
	n := make([]int, len(as))
	for i, a := range as {
		n[i] = a.Attempt
	}
	return n
}

func testTaskAttempts(t *testing.T, newStore func(t *testing.T) store.Store) {
	// Each run of a task is a row: the retried ones as workers report
	// them, the last with its outcome. The retries move no counter and
	// leave the task open.
	t.Run("Recorded", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxRetries: 2}}, 2)
		relayAll(t, s)
		report := apply(t, s, retried(job.ID, 1, 1, "boom 1", "Traceback 1"), retried(job.ID, 1, 2, "boom 2", ""))
		require.Equal(t, store.ApplyReport{Attempts: 2}, withoutEmpty(report), "retries are recorded, never counted")
		require.Equal(t, warren.TaskQueued, task(t, s, job.ID, 1).State, "a retry leaves the task open")
		got := getJob(t, s, job.ID)
		require.Zero(t, got.FailedTasks+got.CompletedTasks)

		last := failed(job.ID, 1, "boom 3")
		last.Attempts, last.Worker, last.Traceback = 3, "w-last", "Traceback 3"
		done := completed(job.ID, 2, `2`)
		done.Attempts, done.Worker = 1, "w-first"
		report = apply(t, s, last, done)
		require.Equal(t, 2, report.Applied)
		require.Equal(t, 0, report.Attempts, "terminal outcomes are not retries")

		as := attempts(t, s, job.ID, 1)
		require.Equal(t, []int{1, 2, 3}, numbers(as))
		require.Equal(t, warren.AttemptRetried, as[0].Outcome)
		require.Equal(t, "boom 1", as[0].Error)
		require.Equal(t, "Traceback 1", as[0].Traceback)
		require.Equal(t, "w-retry", as[0].Worker)
		require.NotNil(t, as[0].StartedAt)
		require.False(t, as[0].FinishedAt.IsZero())
		require.Equal(t, 1, as[0].Generation)
		require.Equal(t, warren.AttemptRetried, as[1].Outcome)
		require.Empty(t, as[1].Traceback)
		require.Equal(t, warren.AttemptFailed, as[2].Outcome)
		require.Equal(t, "boom 3", as[2].Error)
		require.Equal(t, "Traceback 3", as[2].Traceback)
		require.Equal(t, "w-last", as[2].Worker)

		as = attempts(t, s, job.ID, 2)
		require.Len(t, as, 1, "a first-try completion is its one attempt")
		require.Equal(t, warren.AttemptCompleted, as[0].Outcome)
		require.Equal(t, 1, as[0].Attempt)
		require.Equal(t, "w-first", as[0].Worker)
		require.Empty(t, as[0].Error)

		p, err := s.TaskPayload(t.Context(), job.ID, 2)
		require.NoError(t, err)
		require.JSONEq(t, string(payload(2)), string(p))
	})

	t.Run("NoneYet", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 1)
		require.Empty(t, attempts(t, s, job.ID, 1))
		_, err := s.TaskAttempts(t.Context(), job.ID, 2)
		require.ErrorIs(t, err, warren.ErrNotFound)
		_, err = s.TaskAttempts(t.Context(), "no-such-job", 1)
		require.ErrorIs(t, err, warren.ErrNotFound)
		_, err = s.TaskPayload(t.Context(), job.ID, 2)
		require.ErrorIs(t, err, warren.ErrNotFound)
	})

	// The last KeepAttempts (or store.DefaultKeepAttempts) are kept.
	t.Run("Bounded", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxRetries: 100}}, 2)
		relayAll(t, s)
		for i := 1; i <= 5; i++ {
			o := retried(job.ID, 1, i, "boom", "")
			o.KeepAttempts = 3
			apply(t, s, o)
		}
		last := completed(job.ID, 1, `1`)
		last.Attempts, last.KeepAttempts = 6, 3
		apply(t, s, last)
		require.Equal(t, []int{4, 5, 6}, numbers(attempts(t, s, job.ID, 1)))

		var batch []store.Outcome
		for i := 1; i <= store.DefaultKeepAttempts+2; i++ {
			batch = append(batch, retried(job.ID, 2, i, "boom", ""))
		}
		apply(t, s, batch...)
		as := attempts(t, s, job.ID, 2)
		require.Len(t, as, store.DefaultKeepAttempts)
		require.Equal(t, 3, as[0].Attempt)
		require.Equal(t, store.DefaultKeepAttempts+2, as[len(as)-1].Attempt)
	})

	// An attempt's error keeps its head and its traceback its tail; the
	// task's own error is kept whole.
	t.Run("Capped", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 1)
		relayAll(t, s)
		long := strings.Repeat("é", store.MaxAttemptErrorBytes) // 2 bytes each
		tb := "first line\n" + strings.Repeat("x", store.MaxTracebackBytes) + "\nValueError: last"
		o := failed(job.ID, 1, long)
		o.Traceback = tb
		apply(t, s, o)
		as := attempts(t, s, job.ID, 1)
		require.Len(t, as, 1)
		require.Equal(t, long[:store.MaxAttemptErrorBytes], as[0].Error)
		require.LessOrEqual(t, len(as[0].Traceback), store.MaxTracebackBytes)
		require.True(t, strings.HasSuffix(as[0].Traceback, "ValueError: last"), "the traceback keeps its end")
		require.NotContains(t, as[0].Traceback, "first line")
		require.Equal(t, long, task(t, s, job.ID, 1).Error)
	})

	// A retry of another generation than its task's, and one of a task
	// that does not exist, are ignored (never Unknown: nothing to
	// dead-letter); a repeat is recorded once.
	t.Run("StaleAndDuplicates", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxRetries: 3}}, 1)
		relayAll(t, s)
		report := apply(t, s, at(2, retried(job.ID, 1, 1, "from the future", "")), retried(job.ID, 9, 1, "no such task", ""),
			retried("no-such-job", 1, 1, "no such job", ""))
		require.Equal(t, store.ApplyReport{AttemptsIgnored: 3}, withoutEmpty(report))
		require.Empty(t, attempts(t, s, job.ID, 1))

		r := at(1, retried(job.ID, 1, 1, "boom", ""))
		apply(t, s, r, r)
		apply(t, s, r)
		require.Equal(t, []int{1}, numbers(attempts(t, s, job.ID, 1)))

		// The reconciler requeues the task (generation 2): the old
		// generation's retry is ignored, and the new run of attempt 1
		// replaces the row.
		requireReconciled(t, reconcile(t, s, time.Now().Add(2*time.Hour), 100), 1, 0, nil)
		relayAll(t, s)
		report = apply(t, s, at(1, retried(job.ID, 1, 2, "stale", "")))
		require.Equal(t, store.ApplyReport{AttemptsIgnored: 1}, withoutEmpty(report))
		apply(t, s, at(2, retried(job.ID, 1, 1, "rerun", "")))
		as := attempts(t, s, job.ID, 1)
		require.Len(t, as, 1)
		require.Equal(t, "rerun", as[0].Error)
		require.Equal(t, 2, as[0].Generation)

		// A terminal outcome applied twice leaves one row; its duplicate
		// adds none.
		done := at(2, completed(job.ID, 1, `1`))
		done.Attempts = 2
		report = apply(t, s, done, done)
		require.Equal(t, 1, report.Applied)
		require.Equal(t, 1, report.Duplicates)
		require.Equal(t, []int{1, 2}, numbers(attempts(t, s, job.ID, 1)))
	})

	// The attempts of a deleted job go with its tasks: a job created
	// again with its id once they are purged has none.
	t.Run("PurgedWithTheirTasks", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		spec := store.NewJob{ID: "attempts-purged", Policy: warren.Policy{MaxRetries: 1}}
		job := createJob(t, s, spec, 2)
		relayAll(t, s)
		last := failed(job.ID, 1, "boom")
		last.Attempts = 2
		apply(t, s, retried(job.ID, 1, 1, "boom", "tb"), last, completed(job.ID, 2, `2`))
		require.Len(t, attempts(t, s, job.ID, 1), 2)
		finish(t, s, job.ID, warren.JobFailed, nil, "1 of 2 failed")
		require.NoError(t, s.DeleteJob(t.Context(), job.ID))
		for {
			n, err := s.PurgeDeletedTasks(t.Context(), 1)
			require.NoError(t, err)
			if n == 0 {
				break
			}
		}
		again := createJob(t, s, spec, 2)
		require.Equal(t, job.ID, again.ID)
		require.Empty(t, attempts(t, s, again.ID, 1), "no attempt outlives its task")
	})

	// A run the reconciler finds lost is an attempt too: retried when it
	// requeues the task, failed when it fails it, with store.LostError.
	t.Run("LostRuns", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxRetries: 1}}, 1)
		relayAll(t, s)
		requireReconciled(t, reconcile(t, s, time.Now().Add(2*time.Hour), 100), 1, 0, nil)
		as := attempts(t, s, job.ID, 1)
		require.Len(t, as, 1)
		require.Equal(t, warren.AttemptRetried, as[0].Outcome)
		require.Equal(t, store.LostError, as[0].Error)
		require.Equal(t, 1, as[0].Attempt)
		require.Equal(t, 1, as[0].Generation, "the generation the run was lost at")
		require.Empty(t, as[0].Worker)

		relayAll(t, s)
		requireReconciled(t, reconcile(t, s, time.Now().Add(4*time.Hour), 100), 0, 1, []string{job.ID})
		as = attempts(t, s, job.ID, 1)
		require.Equal(t, []int{1, 2}, numbers(as))
		require.Equal(t, warren.AttemptFailed, as[1].Outcome)
		require.Equal(t, 2, as[1].Generation)
		require.Equal(t, 2, task(t, s, job.ID, 1).Attempts)
	})

	// A retry of a task whose job closed since is still history: kept.
	t.Run("AfterClose", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 1)
		relayAll(t, s)
		_, err := s.CancelJob(t.Context(), job.ID)
		require.NoError(t, err)
		report := apply(t, s, retried(job.ID, 1, 1, "late", ""))
		require.Equal(t, 1, report.Attempts)
		require.Len(t, attempts(t, s, job.ID, 1), 1)
	})
}
