package storetest

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

func testRetention(t *testing.T, newStore func(t *testing.T) store.Store) {
	const day = 24 * time.Hour

	t.Run("RoundTrips", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{Retention: 36 * time.Hour}}, 1)
		require.Equal(t, 36*time.Hour, job.Policy.Retention)
		require.Equal(t, 36*time.Hour, getJob(t, s, job.ID).Policy.Retention)
		require.Zero(t, newJob(t, s, 1).Policy.Retention, "0: the server's retention")
	})

	t.Run("ExpiresAfterItsRetention", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := closeJob(t, s, store.NewJob{}, 3)
		finished := *job.FinishedAt

		require.Zero(t, deleteExpired(t, s, store.Expiry{Now: finished.Add(day - time.Microsecond), Retention: day}, 10),
			"a microsecond before its retention has passed")
		requireSameJob(t, job, getJob(t, s, job.ID))
		require.Len(t, allTasks(t, s, job.ID, ""), 3)

		require.Equal(t, 1, deleteExpired(t, s, store.Expiry{Now: finished.Add(day), Retention: day}, 10))
		requireGone(t, s, job.ID)
		require.Equal(t, 3, purgeAll(t, s, 10), "its three tasks are purged")
		requireGone(t, s, job.ID)
	})

	t.Run("OwnRetentionOverridesTheDefault", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		short := closeJob(t, s, store.NewJob{Policy: warren.Policy{Retention: time.Hour}}, 1)
		long := closeJob(t, s, store.NewJob{Policy: warren.Policy{Retention: 30 * day}}, 1)
		byDefault := closeJob(t, s, store.NewJob{}, 1)
		last := *byDefault.FinishedAt

		require.Equal(t, 1, deleteExpired(t, s, store.Expiry{Now: last.Add(2 * time.Hour), Retention: day}, 10))
		requireGone(t, s, short.ID)
		getJob(t, s, long.ID)
		getJob(t, s, byDefault.ID)

		require.Equal(t, 1, deleteExpired(t, s, store.Expiry{Now: last.Add(2 * day), Retention: day}, 10))
		requireGone(t, s, byDefault.ID)
		getJob(t, s, long.ID)

		require.Equal(t, 1, deleteExpired(t, s, store.Expiry{Now: last.Add(31 * day), Retention: day}, 10))
		requireGone(t, s, long.ID)
	})

	t.Run("DefaultForeverKeepsJobsWithoutTheirOwn", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		own := closeJob(t, s, store.NewJob{Policy: warren.Policy{Retention: time.Hour}}, 1)
		byDefault := closeJob(t, s, store.NewJob{}, 1)
		far := byDefault.FinishedAt.Add(warren.MaxRetention)
		for _, forever := range []time.Duration{0, -1} {
			require.Zero(t, deleteExpired(t, s, store.Expiry{Now: byDefault.FinishedAt.Add(time.Minute), Retention: forever}, 10))
		}
		require.Equal(t, 1, deleteExpired(t, s, store.Expiry{Now: far, Retention: -1}, 10), "a job's own retention still applies")
		requireGone(t, s, own.ID)
		require.Zero(t, deleteExpired(t, s, store.Expiry{Now: far, Retention: 0}, 10))
		requireSameJob(t, byDefault, getJob(t, s, byDefault.ID))
	})

	t.Run("CancelledJobsExpire", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 2)
		cancelled, err := s.CancelJob(t.Context(), job.ID)
		require.NoError(t, err)
		require.Equal(t, 1, deleteExpired(t, s, store.Expiry{Now: cancelled.FinishedAt.Add(day), Retention: day}, 10))
		requireGone(t, s, job.ID)
		require.Equal(t, 2, purgeAll(t, s, 10))
	})

	t.Run("OpenJobsAreNeverDeleted", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		quick := store.NewJob{Policy: warren.Policy{Retention: time.Second}}
		pending := createJob(t, s, quick, 2)
		running := createJob(t, s, quick, 2)
		relayAll(t, s)
		apply(t, s, completed(running.ID, 1, `1`))
		running = getJob(t, s, running.ID)
		require.Equal(t, warren.JobRunning, running.State)
		pending, err := s.GetJob(t.Context(), pending.ID)
		require.NoError(t, err)

		far := time.Now().Add(warren.MaxRetention)
		require.Zero(t, deleteExpired(t, s, store.Expiry{Now: far, Retention: time.Second}, 10))
		for _, job := range []warren.Job{pending, running} {
			err := s.DeleteJob(t.Context(), job.ID)
			require.ErrorIs(t, err, store.ErrJobOpen)
			require.ErrorIs(t, err, warren.ErrConflict)
			requireSameJob(t, job, getJob(t, s, job.ID))
			require.Len(t, allTasks(t, s, job.ID, ""), 2, "nothing of it was deleted")
		}
		require.Zero(t, purgeAll(t, s, 10))
	})

	t.Run("RedrivenJobWaitsForItsNextClose", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 2)
		apply(t, s, completed(job.ID, 1, `1`), failed(job.ID, 2, "boom"))
		finish(t, s, job.ID, warren.JobFailed, nil, "1 task failed")
		first := *getJob(t, s, job.ID).FinishedAt
		_, _, err := s.RedriveJob(t.Context(), job.ID)
		require.NoError(t, err)

		require.Zero(t, deleteExpired(t, s, store.Expiry{Now: first.Add(2 * day), Retention: day}, 10),
			"a reopened job is open: never deleted")
		require.Equal(t, warren.JobRunning, getJob(t, s, job.ID).State)

		apply(t, s, completed(job.ID, 2, `2`))
		finish(t, s, job.ID, warren.JobCompleted, []byte(`[1,2]`), "")
		second := *getJob(t, s, job.ID).FinishedAt
		require.True(t, second.After(first))
		require.Zero(t, deleteExpired(t, s, store.Expiry{Now: second.Add(day - time.Microsecond), Retention: day}, 10),
			"its retention counts from its second close")
		require.Equal(t, 1, deleteExpired(t, s, store.Expiry{Now: second.Add(day), Retention: day}, 10))
		requireGone(t, s, job.ID)
	})

	t.Run("ReplayedJobWaitsForItsNextClose", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 1)
		apply(t, s, failed(job.ID, 1, "boom"))
		finish(t, s, job.ID, warren.JobFailed, nil, "1 task failed")
		first := *getJob(t, s, job.ID).FinishedAt
		_, reopened, err := s.ReopenTask(t.Context(), job.ID, 1)
		require.NoError(t, err)
		require.True(t, reopened)

		require.Zero(t, deleteExpired(t, s, store.Expiry{Now: first.Add(2 * day), Retention: day}, 10))
		err = s.DeleteJob(t.Context(), job.ID)
		require.ErrorIs(t, err, store.ErrJobOpen)
		require.Equal(t, warren.JobRunning, getJob(t, s, job.ID).State)
	})

	t.Run("FreesTheIdempotencyKey", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		spec := store.NewJob{IdempotencyKey: "nightly-2030-01-02", RequestHash: "aaa"}
		first := closeJob(t, s, spec, 2)
		again, created, err := s.CreateJob(t.Context(), spec, payloads(2))
		require.NoError(t, err)
		require.False(t, created, "before the deletion the key names the first job")
		require.Equal(t, first.ID, again.ID)

		require.Equal(t, 1, deleteExpired(t, s, store.Expiry{Now: first.FinishedAt.Add(day), Retention: day}, 10))
		spec.RequestHash = "bbb" // even another request may take the key now
		second, created, err := s.CreateJob(t.Context(), spec, payloads(3))
		require.NoError(t, err)
		require.True(t, created, "the key is free once its job is deleted")
		require.NotEqual(t, first.ID, second.ID)
		require.Equal(t, "nightly-2030-01-02", second.IdempotencyKey)
		require.Len(t, allTasks(t, s, second.ID, ""), 3)
		requireGone(t, s, first.ID)

		require.Equal(t, 2, purgeAll(t, s, 10), "only the first job's tasks are purged")
		require.Len(t, allTasks(t, s, second.ID, ""), 3)
	})

	t.Run("NothingOfTheJobRemains", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		other := newJob(t, s, 2)
		job := closeJob(t, s, store.NewJob{Policy: warren.Policy{ToleratedFailures: 1, ToleratedFailurePercent: 100}}, 3, 2)
		requireResult(t, s, job.ID, `[1,3]`)
		counts, err := s.CountJobs(t.Context())
		require.NoError(t, err)
		require.Equal(t, int64(1), counts[warren.JobCompleted])

		require.NoError(t, s.DeleteJob(t.Context(), job.ID))
		requireGone(t, s, job.ID)
		require.ErrorIs(t, s.DeleteJob(t.Context(), job.ID), warren.ErrNotFound, "deleting twice")
		jobs, _, err := s.ListJobs(t.Context(), store.ListJobsOpts{})
		require.NoError(t, err)
		require.Equal(t, []string{other.ID}, jobIDs(jobs))
		counts, err = s.CountJobs(t.Context())
		require.NoError(t, err)
		require.Zero(t, counts[warren.JobCompleted])
		require.Equal(t, int64(1), counts[warren.JobPending])

		require.Equal(t, 3, purgeAll(t, s, 10))
		requireGone(t, s, job.ID)
		require.Len(t, allTasks(t, s, other.ID, ""), 2, "other jobs keep their tasks")
		require.Equal(t, refs(other.ID, 1, 2), offeredRefs(relayAll(t, s)))
	})

	t.Run("DeleteJobUnknownIsNotFound", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		require.ErrorIs(t, s.DeleteJob(t.Context(), "no-such-job"), warren.ErrNotFound)
	})

	t.Run("HonoursLimitFirstExpiredFirst", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		var jobs []warren.Job
		for range 5 {
			jobs = append(jobs, closeJob(t, s, store.NewJob{}, 1))
		}
		at := store.Expiry{Now: jobs[4].FinishedAt.Add(day), Retention: day}
		require.Equal(t, 2, deleteExpired(t, s, at, 2))
		requireGone(t, s, jobs[0].ID)
		requireGone(t, s, jobs[1].ID)
		getJob(t, s, jobs[2].ID)
		require.Equal(t, 2, deleteExpired(t, s, at, 2))
		require.Equal(t, 1, deleteExpired(t, s, at, 2))
		require.Zero(t, deleteExpired(t, s, at, 2))
		for _, job := range jobs {
			requireGone(t, s, job.ID)
		}

		for range store.DefaultPageSize + 1 {
			closeJob(t, s, store.NewJob{Policy: warren.Policy{Retention: time.Second}}, 0)
		}
		at = store.Expiry{Now: time.Now().Add(time.Hour)}
		require.Equal(t, store.DefaultPageSize, deleteExpired(t, s, at, 0), "limit 0 is the default page size")
		require.Equal(t, 1, deleteExpired(t, s, at, 0))
	})

	t.Run("PurgesInBatches", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		for _, n := range []int{5, 3, 4} {
			job := closeJob(t, s, store.NewJob{}, n)
			require.NoError(t, s.DeleteJob(t.Context(), job.ID))
		}
		keep := closeJob(t, s, store.NewJob{}, 2)
		for _, want := range []int{5, 5, 2, 0} {
			n, err := s.PurgeDeletedTasks(t.Context(), 5)
			require.NoError(t, err)
			require.Equal(t, want, n)
		}
		require.Len(t, allTasks(t, s, keep.ID, ""), 2)
	})

	t.Run("ConcurrentSweepsDeleteEachJobOnce", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		const jobs, tasks, sweepers = 20, 3, 4
		for range jobs {
			closeJob(t, s, store.NewJob{Policy: warren.Policy{Retention: time.Second}}, tasks)
		}
		at := store.Expiry{Now: time.Now().Add(time.Hour)}
		var (
			wg              sync.WaitGroup
			mu              sync.Mutex
			deleted, purged int
			errs            []error
		)
		for range sweepers {
			wg.Go(func() {
				for {
					n, err := s.DeleteExpiredJobs(t.Context(), at, 3)
					m, perr := s.PurgeDeletedTasks(t.Context(), 2)
					mu.Lock()
					deleted, purged = deleted+n, purged+m
					errs = append(errs, err, perr)
					mu.Unlock()
					if err != nil || perr != nil || n+m == 0 {
						return
					}
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		require.Equal(t, jobs, deleted, "every job is deleted exactly once")
		purged += purgeAll(t, s, 100)
		require.Equal(t, jobs*tasks, purged, "every task is purged exactly once")
	})

	t.Run("IDOfADeletedJobIsFreeOncePurged", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := closeJob(t, s, store.NewJob{ID: "reused-id"}, 2)
		require.NoError(t, s.DeleteJob(t.Context(), job.ID))

		_, _, err := s.CreateJob(t.Context(), store.NewJob{ID: "reused-id", Type: "test"}, payloads(1))
		require.ErrorIs(t, err, warren.ErrConflict, "its tasks are not purged yet")
		requireGone(t, s, job.ID)

		require.Equal(t, 2, purgeAll(t, s, 10))
		again := createJob(t, s, store.NewJob{ID: "reused-id"}, 1)
		require.Equal(t, warren.JobPending, again.State)
		require.Equal(t, []int64{1}, taskIDs(allTasks(t, s, "reused-id", "")), "only the new job's task")
	})
}

// closeJob creates a job of n tasks from spec, records each task's
// outcome (failed for the ids in failedIDs, completed with its id as
// result otherwise), closes it as completed with the collected results,
// and returns it as stored.
func closeJob(t *testing.T, s store.Store, spec store.NewJob, n int, failedIDs ...int64) warren.Job {
	t.Helper()
	job := createJob(t, s, spec, n)
	var (
		outcomes []store.Outcome
		results  []int64
	)
	for id := int64(1); id <= int64(n); id++ {
		if containsID(failedIDs, id) {
			outcomes = append(outcomes, failed(job.ID, id, "boom"))
			continue
		}
		outcomes = append(outcomes, completed(job.ID, id, string(payloadID(id))))
		results = append(results, id)
	}
	if len(outcomes) > 0 {
		apply(t, s, outcomes...)
	}
	result, err := json.Marshal(results)
	require.NoError(t, err)
	finish(t, s, job.ID, warren.JobCompleted, result, "")
	job = getJob(t, s, job.ID)
	require.NotNil(t, job.FinishedAt)
	return job
}

// payloadID is task id's result in closeJob: its id as JSON.
func payloadID(id int64) json.RawMessage {
	b, _ := json.Marshal(id)
	return b
}

// containsID reports whether ids holds id.
func containsID(ids []int64, id int64) bool {
	for _, i := range ids {
		if i == id {
			return true
		}
	}
	return false
}

// deleteExpired runs DeleteExpiredJobs and returns how many jobs it
// deleted.
func deleteExpired(t *testing.T, s store.Store, at store.Expiry, limit int) int {
	t.Helper()
	n, err := s.DeleteExpiredJobs(t.Context(), at, limit)
	require.NoError(t, err)
	return n
}

// purgeAll runs PurgeDeletedTasks in batches of limit until one deletes
// fewer, and returns how many tasks they deleted in all.
func purgeAll(t *testing.T, s store.Store, limit int) int {
	t.Helper()
	total := 0
	for {
		n, err := s.PurgeDeletedTasks(t.Context(), limit)
		require.NoError(t, err)
		require.LessOrEqual(t, n, limit)
		total += n
		if n < limit {
			return total
		}
	}
}

// requireGone fails unless every method that names job id answers as for
// a job that never existed.
func requireGone(t *testing.T, s store.Store, id string) {
	t.Helper()
	ctx := t.Context()
	_, err := s.GetJob(ctx, id)
	require.ErrorIs(t, err, warren.ErrNotFound, "GetJob")
	_, _, err = s.ListTasks(ctx, id, store.ListTasksOpts{})
	require.ErrorIs(t, err, warren.ErrNotFound, "ListTasks")
	_, err = s.JobErrors(ctx, id, 10)
	require.ErrorIs(t, err, warren.ErrNotFound, "JobErrors")
	err = s.ScanResults(ctx, id, func(int64, warren.TaskState, json.RawMessage) error {
		return nil
	})
	require.ErrorIs(t, err, warren.ErrNotFound, "ScanResults")
	_, err = s.JobResult(ctx, id)
	require.ErrorIs(t, err, warren.ErrNotFound, "JobResult")
	_, err = s.CancelJob(ctx, id)
	require.ErrorIs(t, err, warren.ErrNotFound, "CancelJob")
	_, _, err = s.RedriveJob(ctx, id)
	require.ErrorIs(t, err, warren.ErrNotFound, "RedriveJob")
	_, _, err = s.ReopenTask(ctx, id, 2)
	require.ErrorIs(t, err, warren.ErrNotFound, "ReopenTask")
	_, err = s.FinishJob(ctx, id, 0, warren.JobCompleted, nil, "")
	require.ErrorIs(t, err, warren.ErrNotFound, "FinishJob")
	require.ErrorIs(t, s.DeleteJob(ctx, id), warren.ErrNotFound, "DeleteJob")
	report := apply(t, s, completed(id, 1, `1`), failed(id, 2, "late"))
	require.Equal(t, []int{0, 1}, report.Unknown, "outcomes of its tasks are unknown")
	require.Zero(t, report.Applied+report.Duplicates+report.Closed)
}
