package storetest

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

func testApplyOutcomes(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("RecordsOutcomes", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 3)
		relayAll(t, s)
		// Nanoseconds: the store keeps at least microseconds.
		started := time.Date(2030, 1, 2, 3, 4, 5, 123456789, time.UTC)
		finished := started.Add(1500 * time.Millisecond)

		report := apply(t, s,
			store.Outcome{JobID: job.ID, TaskID: 1, State: warren.TaskCompleted, Result: []byte(`{"v": 1}`),
				Attempts: 1, Worker: "w1", StartedAt: &started, FinishedAt: &finished},
			store.Outcome{JobID: job.ID, TaskID: 2, State: warren.TaskFailed, Error: "boom",
				Attempts: 4, Worker: "w2", StartedAt: &started, FinishedAt: &finished})
		require.Equal(t, store.ApplyReport{Applied: 2, AppliedFailed: 1}, withoutEmpty(report))

		got := getJob(t, s, job.ID)
		require.Equal(t, int64(1), got.CompletedTasks)
		require.Equal(t, int64(1), got.FailedTasks)
		require.Equal(t, int64(1), got.PendingTasks())
		require.Equal(t, warren.JobRunning, got.State)

		tasks := allTasks(t, s, job.ID, "")
		require.Len(t, tasks, 3)
		done, broken, waiting := tasks[0], tasks[1], tasks[2]

		require.Equal(t, warren.TaskCompleted, done.State)
		require.JSONEq(t, `{"v": 1}`, string(done.Result))
		require.Empty(t, done.Error)
		require.Equal(t, 1, done.Attempts)
		require.Equal(t, "w1", done.Worker)
		requireSameTime(t, &started, done.StartedAt, "StartedAt")
		requireSameTime(t, &finished, done.FinishedAt, "FinishedAt")
		requireRecent(t, done.QueuedAt, "QueuedAt is kept")

		require.Equal(t, warren.TaskFailed, broken.State)
		require.Empty(t, broken.Result)
		require.Equal(t, "boom", broken.Error)
		require.Equal(t, 4, broken.Attempts)
		require.Equal(t, "w2", broken.Worker)
		requireSameTime(t, &started, broken.StartedAt, "StartedAt")
		requireSameTime(t, &finished, broken.FinishedAt, "FinishedAt")

		require.Equal(t, warren.TaskQueued, waiting.State)
		require.Nil(t, waiting.FinishedAt)
	})

	t.Run("UnknownAttemptsKeepTheCountButAtLeastOne", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 2)
		relayAll(t, s)
		// Task 2 fails after 4 runs; the redrive keeps that count and
		// sends back task 1, which never ran.
		apply(t, s, failed(job.ID, 2, "boom"))
		ok, err := s.FinishJob(t.Context(), job.ID, getJob(t, s, job.ID).Version, warren.JobFailed, nil, "gave up")
		require.NoError(t, err)
		require.True(t, ok)
		_, _, err = s.RedriveJob(t.Context(), job.ID)
		require.NoError(t, err)
		relayAll(t, s)

		never, again := completed(job.ID, 1, `1`), completed(job.ID, 2, `2`)
		never.Attempts, again.Attempts = 0, 0
		require.Equal(t, 2, apply(t, s, never, again).Applied)
		tasks := allTasks(t, s, job.ID, "")
		require.Equal(t, 1, tasks[0].Attempts, "a task that produced an outcome ran at least once")
		require.Equal(t, 4, tasks[1].Attempts, "an unknown count keeps the stored one")
	})

	t.Run("UnknownWorkerKeepsTheStoredOne", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 2)
		relayAll(t, s)
		// Both tasks fail on worker "w"; the redrive keeps that worker
		// until a new outcome names another.
		apply(t, s, failed(job.ID, 1, "boom"), failed(job.ID, 2, "boom"))
		finish(t, s, job.ID, warren.JobFailed, nil, "gave up")
		_, _, err := s.RedriveJob(t.Context(), job.ID)
		require.NoError(t, err)
		relayAll(t, s)

		unnamed, named := completed(job.ID, 1, `1`), completed(job.ID, 2, `2`)
		unnamed.Worker, named.Worker = "", "w2"
		require.Equal(t, 2, apply(t, s, unnamed, named).Applied)
		require.Equal(t, "w", task(t, s, job.ID, 1).Worker, "an unknown worker keeps the stored one")
		require.Equal(t, "w2", task(t, s, job.ID, 2).Worker, "a named worker replaces the stored one")
	})

	// A worker that reports no times (a dead letter, say): the outcome
	// is finished when the store records it, and started_at keeps what
	// the task row holds (nothing, for a task that never reported one).
	t.Run("UnknownTimesKeepTheStartAndFinishNow", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 2)
		relayAll(t, s)
		before := time.Now().Add(-time.Second)
		report := apply(t, s, failed(job.ID, 1, "dead-lettered"), completed(job.ID, 2, ""))
		require.Equal(t, store.ApplyReport{Applied: 2, AppliedFailed: 1, ReadyToClose: []string{job.ID}}, withoutEmpty(report))

		for _, tk := range allTasks(t, s, job.ID, "") {
			require.Nil(t, tk.StartedAt, "task %d: no start reported, none stored", tk.TaskID)
			requireRecent(t, tk.FinishedAt, "FinishedAt")
			require.False(t, tk.FinishedAt.Before(before.Truncate(time.Microsecond)), "task %d: finished when recorded", tk.TaskID)
		}
		require.Empty(t, task(t, s, job.ID, 2).Result, "a completed outcome without a result stores none")
	})

	// A job's started_at is when its first task started, as the workers
	// reported it in the outcomes (the earliest start of any batch), not
	// when the relay published its last task: that is published_at.
	t.Run("JobStartedAtIsTheEarliestReportedStart", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 4)
		relayAll(t, s)
		published := getJob(t, s, job.ID)
		require.Equal(t, warren.JobRunning, published.State)
		require.Nil(t, published.StartedAt, "no task reported a start yet")
		requireRecent(t, published.PublishedAt, "PublishedAt")

		now := time.Now().UTC()
		at := func(d time.Duration) *time.Time { tm := now.Add(-d); return &tm }
		ran := func(taskID int64, started *time.Time) store.Outcome {
			o := completed(job.ID, taskID, "")
			o.StartedAt, o.FinishedAt = started, &now
			return o
		}
		require.Nil(t, published.LastFinishedAt, "no outcome yet")
		apply(t, s, ran(1, at(10*time.Second)))
		first := getJob(t, s, job.ID)
		requireSameTime(t, at(10*time.Second), first.StartedAt, "the first outcome's start")
		requireSameTime(t, &now, first.LastFinishedAt, "the first outcome's finish")

		// The earliest start of a batch wins, earlier than the stored one.
		apply(t, s, ran(2, at(5*time.Second)), ran(3, at(20*time.Second)))
		requireSameTime(t, at(20*time.Second), getJob(t, s, job.ID).StartedAt, "the batch's earliest start")

		// A later start, or none (a dead letter), leaves it.
		apply(t, s, failed(job.ID, 4, "dead-lettered"))
		got := getJob(t, s, job.ID)
		requireSameTime(t, at(20*time.Second), got.StartedAt, "an outcome without a start keeps it")
		requireSameTime(t, published.PublishedAt, got.PublishedAt, "outcomes do not move published_at")
		require.True(t, got.LastFinishedAt.After(now), "an outcome without a finish finished when recorded")

		// A redrive runs the failed task again: the job started when it
		// first did.
		finish(t, s, job.ID, warren.JobFailed, nil, "gave up")
		_, _, err := s.RedriveJob(t.Context(), job.ID)
		require.NoError(t, err)
		relayAll(t, s)
		apply(t, s, ran(4, at(time.Second)))
		requireSameTime(t, at(20*time.Second), getJob(t, s, job.ID).StartedAt, "a redrive keeps the first start")
	})

	t.Run("JobWithoutReportedStartsHasNoStartedAt", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 1)
		relayAll(t, s)
		apply(t, s, failed(job.ID, 1, "dead-lettered"))
		got := getJob(t, s, job.ID)
		require.Nil(t, got.StartedAt, "no worker reported a start")
		requireRecent(t, got.PublishedAt, "PublishedAt")
	})

	t.Run("UnfinishedStateFailsTheBatch", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 2)
		relayAll(t, s)

		_, err := s.ApplyOutcomes(t.Context(), []store.Outcome{
			completed(job.ID, 1, `1`),
			{JobID: job.ID, TaskID: 2, State: warren.TaskQueued},
		})
		require.Error(t, err)
		require.Equal(t, repeat(warren.TaskQueued, 2), taskStates(t, s, job.ID), "nothing of the batch is written")
		require.Zero(t, getJob(t, s, job.ID).CompletedTasks)
	})

	// PostgreSQL refuses NUL and invalid UTF-8 in text: worker-supplied
	// text is stored as valid UTF-8 without NUL (each bad run or NUL a
	// U+FFFD), on every store, and the rest of the batch is recorded with
	// it.
	t.Run("WorkerTextIsStoredAsValidUTF8", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 2)
		relayAll(t, s)
		report := apply(t, s,
			store.Outcome{JobID: job.ID, TaskID: 1, State: warren.TaskFailed, Error: "nul\x00here, bad \xff\xfe bytes",
				Attempts: 1, Worker: "w\x00\xc3"},
			completed(job.ID, 2, `2`))
		require.Equal(t, store.ApplyReport{Applied: 2, AppliedFailed: 1, ReadyToClose: []string{job.ID}}, withoutEmpty(report))

		tasks := allTasks(t, s, job.ID, "")
		require.Equal(t, "nul\uFFFDhere, bad \uFFFD bytes", tasks[0].Error)
		require.Equal(t, "w\uFFFD\uFFFD", tasks[0].Worker)
		errs, err := s.JobErrors(t.Context(), job.ID, 0)
		require.NoError(t, err)
		require.Equal(t, []warren.TaskError{{TaskID: 1, Error: "nul\uFFFDhere, bad \uFFFD bytes"}}, errs)

		finish(t, s, job.ID, warren.JobFailed, nil, "task 1: \x00\xff")
		require.Equal(t, "task 1: \uFFFD\uFFFD", getJob(t, s, job.ID).Error)
	})

	// A result is JSON, not text: one holding \u0000 (which jsonb
	// refuses) comes back byte for byte, spacing and escapes included.
	t.Run("ResultsAreStoredByteForByte", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 1)
		relayAll(t, s)
		result := json.RawMessage(`{ "s" : "nul \u0000 and \ud800 kept",  "n": 1.50 }`)
		apply(t, s, store.Outcome{JobID: job.ID, TaskID: 1, State: warren.TaskCompleted, Result: result, Attempts: 1})

		require.Equal(t, string(result), string(allTasks(t, s, job.ID, "")[0].Result), "ListTasks")
		var scanned []byte
		require.NoError(t, s.ScanResults(t.Context(), job.ID, func(_ int64, _ warren.TaskState, r json.RawMessage) error {
			scanned = append([]byte(nil), r...)
			return nil
		}))
		require.Equal(t, string(result), string(scanned), "ScanResults")

		reduced := []byte(`[{ "s" : "nul \u0000 and \ud800 kept",  "n": 1.50 }]`)
		finish(t, s, job.ID, warren.JobCompleted, reduced, "")
		got, err := s.JobResult(t.Context(), job.ID)
		require.NoError(t, err)
		require.Equal(t, string(reduced), string(got), "JobResult")
	})

	t.Run("EmptyBatch", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		require.Equal(t, store.ApplyReport{}, withoutEmpty(apply(t, s)))
	})

	t.Run("SameBatchTwiceIsDuplicate", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 3)
		relayAll(t, s)
		batch := []store.Outcome{completed(job.ID, 1, `"first"`), failed(job.ID, 2, "first error")}

		require.Equal(t, store.ApplyReport{Applied: 2, AppliedFailed: 1}, withoutEmpty(apply(t, s, batch...)))
		before := allTasks(t, s, job.ID, "")
		require.Equal(t, store.ApplyReport{Duplicates: 2}, withoutEmpty(apply(t, s, batch...)))
		require.Equal(t, store.ApplyReport{Duplicates: 2}, withoutEmpty(apply(t, s,
			failed(job.ID, 1, "late failure"), completed(job.ID, 2, `"late result"`))),
			"a different outcome for a finished task is a duplicate too")

		got := getJob(t, s, job.ID)
		require.Equal(t, int64(1), got.CompletedTasks)
		require.Equal(t, int64(1), got.FailedTasks)
		require.Equal(t, before, allTasks(t, s, job.ID, ""), "the first outcome stays")
	})

	t.Run("SameOutcomeTwiceInABatch", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 2)
		relayAll(t, s)

		report := apply(t, s, completed(job.ID, 1, `1`), completed(job.ID, 1, `1`))
		require.Equal(t, store.ApplyReport{Applied: 1, Duplicates: 1}, withoutEmpty(report))
		require.Equal(t, int64(1), getJob(t, s, job.ID).CompletedTasks)
	})

	t.Run("UnknownJobOrTask", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 3)
		relayAll(t, s)

		report := apply(t, s,
			completed("no-such-job", 1, `1`),
			completed(job.ID, 4, `4`),
			completed(job.ID, 2, `2`),
			failed(job.ID, 0, "zero"),
			failed(job.ID, -1, "negative"))
		require.Equal(t, []int{0, 1, 3, 4}, report.Unknown)
		require.Equal(t, 1, report.Applied)
		require.Zero(t, report.Duplicates)
		require.Zero(t, report.Closed)
		require.Empty(t, report.ReadyToClose)

		got := getJob(t, s, job.ID)
		require.Equal(t, int64(1), got.CompletedTasks)
		require.Zero(t, got.FailedTasks)
		require.Equal(t, []int64{1, 2, 3}, taskIDs(allTasks(t, s, job.ID, "")), "no task was added")
		_, err := s.GetJob(t.Context(), "no-such-job")
		require.ErrorIs(t, err, warren.ErrNotFound, "no job was added")
	})

	t.Run("ClosedJobIsANoOp", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		finished := newJob(t, s, 2)
		cancelled := newJob(t, s, 2)
		relayAll(t, s)
		apply(t, s, completed(finished.ID, 1, `1`))
		ok, err := s.FinishJob(t.Context(), finished.ID, getJob(t, s, finished.ID).Version, warren.JobFailed, nil, "gave up")
		require.NoError(t, err)
		require.True(t, ok)
		_, err = s.CancelJob(t.Context(), cancelled.ID)
		require.NoError(t, err)
		finishedBefore, cancelledBefore := getJob(t, s, finished.ID), getJob(t, s, cancelled.ID)

		report := apply(t, s,
			completed(finished.ID, 2, `2`), failed(finished.ID, 1, "late"),
			completed(cancelled.ID, 1, `1`), failed(cancelled.ID, 2, "late"))
		require.Equal(t, store.ApplyReport{Closed: 4}, withoutEmpty(report))

		requireSameJob(t, finishedBefore, getJob(t, s, finished.ID))
		requireSameJob(t, cancelledBefore, getJob(t, s, cancelled.ID))
		require.Equal(t, []warren.TaskState{warren.TaskCompleted, warren.TaskCancelled}, taskStates(t, s, finished.ID))
		require.Equal(t, repeat(warren.TaskCancelled, 2), taskStates(t, s, cancelled.ID))
	})

	// A task the job never had is Unknown, whatever the job's state: an
	// outcome naming it is malformed, not late.
	t.Run("TaskOutsideAClosedJobIsUnknown", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 2)
		relayAll(t, s)
		finish(t, s, job.ID, warren.JobFailed, nil, "gave up")

		report := apply(t, s, completed(job.ID, 3, `3`), completed(job.ID, 1, `1`), failed(job.ID, 0, "zero"))
		require.Equal(t, store.ApplyReport{Closed: 1, Unknown: []int{0, 2}}, withoutEmpty(report))
	})

	// The judgement of one outcome sees what the outcomes before it in
	// the batch did, across jobs: every outcome of a batch is judged in
	// its order, each job's counters move once.
	t.Run("MixedBatchIsJudgedInOrder", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		open, other := newJob(t, s, 3), newJob(t, s, 2)
		closed := newJob(t, s, 1)
		relayAll(t, s)
		_, err := s.CancelJob(t.Context(), closed.ID)
		require.NoError(t, err)

		report := apply(t, s,
			completed(open.ID, 1, `1`),
			completed(closed.ID, 1, `1`),
			failed(other.ID, 2, "boom"),
			failed(open.ID, 1, "late copy"),
			completed("no-such-job", 1, `1`),
			completed(other.ID, 1, `1`),
			completed(open.ID, 9, `9`),
			at(7, completed(open.ID, 2, `2`)),
			completed(open.ID, 2, `2`))
		require.Equal(t, store.ApplyReport{Applied: 4, AppliedFailed: 1, Duplicates: 2, Closed: 1, Unknown: []int{4, 6},
			ReadyToClose: []string{other.ID}}, withoutEmpty(report))

		got := getJob(t, s, open.ID)
		require.Equal(t, []int64{2, 0}, []int64{got.CompletedTasks, got.FailedTasks})
		require.Equal(t, []warren.TaskState{warren.TaskCompleted, warren.TaskCompleted, warren.TaskQueued}, taskStates(t, s, open.ID))
		got = getJob(t, s, other.ID)
		require.Equal(t, []int64{1, 1}, []int64{got.CompletedTasks, got.FailedTasks})
	})

	t.Run("PendingTaskIsApplied", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		// The broker confirmed and a worker answered before the relay
		// marked the task queued.
		job := newJob(t, s, 2)

		require.Equal(t, store.ApplyReport{Applied: 1}, withoutEmpty(apply(t, s, completed(job.ID, 1, `1`))))
		require.Equal(t, []warren.TaskState{warren.TaskCompleted, warren.TaskPending}, taskStates(t, s, job.ID))
		require.Equal(t, int64(1), getJob(t, s, job.ID).CompletedTasks)
	})

	t.Run("ReadyToCloseWhenLastTaskFinishes", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 3)
		other := newJob(t, s, 3)
		relayAll(t, s)

		require.Empty(t, apply(t, s, completed(job.ID, 1, `1`), completed(other.ID, 1, `1`)).ReadyToClose)
		report := apply(t, s, completed(job.ID, 2, `2`), failed(job.ID, 3, "boom"), completed(other.ID, 2, `2`))
		require.Equal(t, []string{job.ID}, report.ReadyToClose, "listed once, though two of its outcomes are in the batch")
		require.Empty(t, apply(t, s, completed(job.ID, 3, `3`)).ReadyToClose, "a duplicate does not make it ready again")
		require.Equal(t, warren.JobRunning, getJob(t, s, job.ID).State, "ApplyOutcomes does not close the job")
	})

	t.Run("FailFastReadyAtFirstFailure", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{FailFast: true}}, 5)
		relayAll(t, s)

		require.Empty(t, apply(t, s, completed(job.ID, 1, `1`)).ReadyToClose)
		require.Equal(t, []string{job.ID}, apply(t, s, failed(job.ID, 2, "boom"), failed(job.ID, 3, "boom")).ReadyToClose)
		report := apply(t, s, failed(job.ID, 4, "boom"))
		require.Equal(t, 1, report.Applied, "the job is open until FinishJob")
		require.Empty(t, report.ReadyToClose, "it was ready already")
	})

	t.Run("FailFastWithinTolerance", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		counted := createJob(t, s, store.NewJob{Policy: warren.Policy{FailFast: true, ToleratedFailures: 1, ToleratedFailurePercent: 100}}, 5)
		share := createJob(t, s, store.NewJob{Policy: warren.Policy{FailFast: true, ToleratedFailures: 10, ToleratedFailurePercent: 20}}, 5)
		relayAll(t, s)

		require.Empty(t, apply(t, s, failed(counted.ID, 1, "boom"), failed(share.ID, 1, "boom")).ReadyToClose,
			"one failure is tolerated by both")
		require.ElementsMatch(t, []string{counted.ID, share.ID},
			apply(t, s, failed(counted.ID, 2, "boom"), failed(share.ID, 2, "boom")).ReadyToClose,
			"two failures: more than 1, and 40% > 20%")
	})

	t.Run("NotFailFastWaitsForEveryTask", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 3)
		relayAll(t, s)

		require.Empty(t, apply(t, s, failed(job.ID, 1, "boom"), failed(job.ID, 2, "boom")).ReadyToClose)
		ids, err := s.JobsToClose(t.Context(), 10)
		require.NoError(t, err)
		require.Empty(t, ids)
		require.Equal(t, []string{job.ID}, apply(t, s, completed(job.ID, 3, `3`)).ReadyToClose)
	})

	t.Run("ConcurrentOverlappingBatches", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		const tasksPerJob, aggregators, batchSize = 100, 4, 20
		jobs := []string{newJob(t, s, tasksPerJob).ID, newJob(t, s, tasksPerJob).ID}
		relayAll(t, s)
		// Every aggregator reports every task, in its own order; task i of
		// every job fails when i%7 == 0.
		var all []store.Outcome
		for i := int64(1); i <= tasksPerJob; i++ {
			for _, id := range jobs {
				if i%7 == 0 {
					all = append(all, failed(id, i, "boom"))
				} else {
					all = append(all, completed(id, i, `1`))
				}
			}
		}

		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			reports = make([][]store.ApplyReport, aggregators)
			errs    = make([]error, aggregators)
		)
		for a := range aggregators {
			outcomes := slices.Clone(all)
			rand.New(rand.NewPCG(uint64(a), 42)).Shuffle(len(outcomes), func(i, j int) {
				outcomes[i], outcomes[j] = outcomes[j], outcomes[i]
			})
			wg.Go(func() {
				<-start
				for batch := range slices.Chunk(outcomes, batchSize) {
					// Redelivery within a batch, too.
					report, err := s.ApplyOutcomes(t.Context(), append(batch, batch[0]))
					if err != nil {
						errs[a] = err
						return
					}
					reports[a] = append(reports[a], report)
				}
			})
		}
		close(start)
		wg.Wait()

		var (
			applied, duplicates int
			ready               []string
		)
		for a := range aggregators {
			require.NoError(t, errs[a])
			for _, report := range reports[a] {
				require.Empty(t, report.Unknown)
				require.Zero(t, report.Closed)
				applied += report.Applied
				duplicates += report.Duplicates
				ready = append(ready, report.ReadyToClose...)
			}
		}
		require.Equal(t, len(all), applied, "each task applied exactly once")
		batches := len(all) / batchSize
		require.Equal(t, aggregators*(len(all)+batches), applied+duplicates)
		require.ElementsMatch(t, jobs, ready, "each job reported ready exactly once")
		for _, id := range jobs {
			job := getJob(t, s, id)
			require.Equal(t, int64(tasksPerJob/7), job.FailedTasks)
			require.Equal(t, int64(tasksPerJob-tasksPerJob/7), job.CompletedTasks)
			for _, task := range allTasks(t, s, id, "") {
				if task.TaskID%7 == 0 {
					require.Equal(t, warren.TaskFailed, task.State)
				} else {
					require.Equal(t, warren.TaskCompleted, task.State)
				}
			}
		}
	})
}

func testJobsToClose(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("FindsReadyOpenJobs", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		allDone := newJob(t, s, 2)
		failFast := createJob(t, s, store.NewJob{Policy: warren.Policy{FailFast: true}}, 3)
		tolerated := createJob(t, s, store.NewJob{Policy: warren.Policy{FailFast: true, ToleratedFailures: 1, ToleratedFailurePercent: 50}}, 3)
		halfDone := newJob(t, s, 2)
		closed := newJob(t, s, 1)
		cancelled := newJob(t, s, 1)
		relayAll(t, s)
		apply(t, s,
			completed(allDone.ID, 1, `1`), failed(allDone.ID, 2, "boom"),
			failed(failFast.ID, 1, "boom"),
			failed(tolerated.ID, 1, "boom"),
			completed(halfDone.ID, 1, `1`),
			completed(closed.ID, 1, `1`),
			completed(cancelled.ID, 1, `1`))
		// A crash after the outcomes committed and before FinishJob leaves
		// allDone and failFast open; closed and cancelled were closed.
		ok, err := s.FinishJob(t.Context(), closed.ID, getJob(t, s, closed.ID).Version, warren.JobCompleted, []byte(`[1]`), "")
		require.NoError(t, err)
		require.True(t, ok)
		_, err = s.CancelJob(t.Context(), cancelled.ID)
		require.NoError(t, err)

		ids, err := s.JobsToClose(t.Context(), 10)
		require.NoError(t, err)
		require.ElementsMatch(t, []string{allDone.ID, failFast.ID}, ids)

		ids, err = s.JobsToClose(t.Context(), 1)
		require.NoError(t, err)
		require.Len(t, ids, 1, "limit")
		require.Contains(t, []string{allDone.ID, failFast.ID}, ids[0])
	})

	t.Run("NotReadyCandidatesDoNotHideReadyJobs", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		// Fail-fast jobs with a failure within their tolerance look like
		// candidates but are not ready; the ready job stands between them,
		// so a page of candidates cut before the filter would miss it.
		tolerant := store.NewJob{Policy: warren.Policy{FailFast: true, ToleratedFailures: 1, ToleratedFailurePercent: 50}}
		before := []warren.Job{createJob(t, s, tolerant, 2), createJob(t, s, tolerant, 2)}
		ready := newJob(t, s, 1)
		after := []warren.Job{createJob(t, s, tolerant, 2), createJob(t, s, tolerant, 2)}
		relayAll(t, s)
		outcomes := []store.Outcome{completed(ready.ID, 1, `1`)}
		for _, j := range append(before, after...) {
			outcomes = append(outcomes, failed(j.ID, 1, "boom"))
		}
		apply(t, s, outcomes...)

		for _, limit := range []int{1, 2, 10} {
			ids, err := s.JobsToClose(t.Context(), limit)
			require.NoError(t, err)
			require.Equal(t, []string{ready.ID}, ids, "limit %d", limit)
		}
	})

	t.Run("NoLimitMeansDefaultPageSize", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		const jobs = store.DefaultPageSize + 1
		var outcomes []store.Outcome
		for range jobs {
			outcomes = append(outcomes, completed(newJob(t, s, 1).ID, 1, `1`))
		}
		relayAll(t, s)
		apply(t, s, outcomes...)

		for _, limit := range []int{0, -1} {
			ids, err := s.JobsToClose(t.Context(), limit)
			require.NoError(t, err)
			require.Len(t, ids, store.DefaultPageSize, "limit %d means store.DefaultPageSize", limit)
		}
		ids, err := s.JobsToClose(t.Context(), jobs)
		require.NoError(t, err)
		require.Len(t, ids, jobs, "every ready job, given room")
	})

	t.Run("NoneWhenNothingFinished", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		newJob(t, s, 2)
		ids, err := s.JobsToClose(t.Context(), 10)
		require.NoError(t, err)
		require.Empty(t, ids)
	})
}

// withoutEmpty normalises a report so that an empty Unknown or
// ReadyToClose compares equal whether it is nil or not.
func withoutEmpty(r store.ApplyReport) store.ApplyReport {
	if len(r.Unknown) == 0 {
		r.Unknown = nil
	}
	if len(r.ReadyToClose) == 0 {
		r.ReadyToClose = nil
	}
	if len(r.SpawnedJobs) == 0 {
		r.SpawnedJobs = nil
	}
	return r
}
