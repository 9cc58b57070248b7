package storetest

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

func testFinishJob(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("CompletedWithResult", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 2)
		relayAll(t, s)
		apply(t, s, completed(job.ID, 1, `1`), completed(job.ID, 2, `2`))

		ok, err := s.FinishJob(t.Context(), job.ID, getJob(t, s, job.ID).Version, warren.JobCompleted, []byte(`[1, 2]`), "")
		require.NoError(t, err)
		require.True(t, ok)

		got := getJob(t, s, job.ID)
		require.Equal(t, warren.JobCompleted, got.State)
		requireRecent(t, got.FinishedAt, "FinishedAt")
		require.NotEmpty(t, got.ResultLocation)
		require.Equal(t, store.ResultLocation(job.ID), got.ResultLocation)
		require.Empty(t, got.Error)
		require.Equal(t, int64(2), got.CompletedTasks)
		result, err := s.JobResult(t.Context(), job.ID)
		require.NoError(t, err)
		require.JSONEq(t, `[1, 2]`, string(result))

		ok, err = s.FinishJob(t.Context(), job.ID, getJob(t, s, job.ID).Version, warren.JobFailed, nil, "too late")
		require.NoError(t, err)
		require.False(t, ok, "the job is closed already")
		requireSameJob(t, got, getJob(t, s, job.ID))
		result, err = s.JobResult(t.Context(), job.ID)
		require.NoError(t, err)
		require.JSONEq(t, `[1, 2]`, string(result))
	})

	t.Run("FailedWithoutResult", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 1)
		relayAll(t, s)
		apply(t, s, failed(job.ID, 1, "boom"))

		ok, err := s.FinishJob(t.Context(), job.ID, getJob(t, s, job.ID).Version, warren.JobFailed, nil, "1 of 1 tasks failed")
		require.NoError(t, err)
		require.True(t, ok)

		got := getJob(t, s, job.ID)
		require.Equal(t, warren.JobFailed, got.State)
		require.Equal(t, "1 of 1 tasks failed", got.Error)
		require.Empty(t, got.ResultLocation)
		requireRecent(t, got.FinishedAt, "FinishedAt")
		_, err = s.JobResult(t.Context(), job.ID)
		require.ErrorIs(t, err, warren.ErrNotFound)
	})

	t.Run("CancelsUnfinishedTasks", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{FailFast: true}}, 4)
		relay(t, s, 2)
		apply(t, s, completed(job.ID, 1, `1`))

		ok, err := s.FinishJob(t.Context(), job.ID, getJob(t, s, job.ID).Version, warren.JobFailed, nil, "failed fast")
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, []warren.TaskState{warren.TaskCompleted, warren.TaskCancelled, warren.TaskCancelled, warren.TaskCancelled},
			taskStates(t, s, job.ID))
		got := getJob(t, s, job.ID)
		require.Equal(t, int64(1), got.CompletedTasks, "counters stay")
		require.Zero(t, got.FailedTasks)

		report := apply(t, s, completed(job.ID, 2, `2`), failed(job.ID, 3, "late"))
		require.Equal(t, store.ApplyReport{Closed: 2}, withoutEmpty(report))
		requireSameJob(t, got, getJob(t, s, job.ID))
		require.Empty(t, relayAll(t, s))
	})

	t.Run("ConcurrentCallersOneWins", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 1)
		apply(t, s, completed(job.ID, 1, `1`))
		version := getJob(t, s, job.ID).Version
		const callers = 8
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			oks   = make([]bool, callers)
			errs  = make([]error, callers)
		)
		for i := range callers {
			wg.Go(func() {
				<-start
				oks[i], errs[i] = s.FinishJob(t.Context(), job.ID, version, warren.JobCompleted, []byte(strconv.Itoa(i)), "")
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i := range callers {
			require.NoError(t, errs[i])
			if oks[i] {
				require.Equal(t, -1, winner, "callers %d and %d both closed the job", winner, i)
				winner = i
			}
		}
		require.NotEqual(t, -1, winner, "one caller closes the job")
		result, err := s.JobResult(t.Context(), job.ID)
		require.NoError(t, err)
		require.JSONEq(t, strconv.Itoa(winner), string(result), "the winner's result is stored")
	})

	t.Run("OtherStatesChangeNothing", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 3)
		relay(t, s, 2)
		apply(t, s, completed(job.ID, 1, `1`))
		before, tasks := getJob(t, s, job.ID), allTasks(t, s, job.ID, "")

		for _, state := range []warren.JobState{warren.JobCancelled, warren.JobRunning, warren.JobPending, "", "done"} {
			ok, err := s.FinishJob(t.Context(), job.ID, before.Version, state, []byte(`1`), "wrong state")
			require.Error(t, err, "state %q is not completed or failed", state)
			require.False(t, ok, "state %q", state)
			requireSameJob(t, before, getJob(t, s, job.ID))
			require.Equal(t, tasks, allTasks(t, s, job.ID, ""), "state %q", state)
			_, err = s.JobResult(t.Context(), job.ID)
			require.ErrorIs(t, err, warren.ErrNotFound, "state %q stores no result", state)
		}

		_, err := s.FinishJob(t.Context(), "no-such-job", 0, warren.JobCancelled, nil, "")
		require.Error(t, err)
		require.NotErrorIs(t, err, warren.ErrNotFound, "the state is refused before the job is looked up")
	})

	t.Run("UnknownJob", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ok, err := s.FinishJob(t.Context(), "no-such-job", 0, warren.JobCompleted, []byte(`1`), "")
		require.False(t, ok)
		if err != nil {
			require.ErrorIs(t, err, warren.ErrNotFound)
		}
		_, err = s.JobResult(t.Context(), "no-such-job")
		require.ErrorIs(t, err, warren.ErrNotFound)
	})

	t.Run("NoResultWhileOpen", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 1)
		_, err := s.JobResult(t.Context(), job.ID)
		require.ErrorIs(t, err, warren.ErrNotFound)
		require.Empty(t, getJob(t, s, job.ID).ResultLocation)
	})

	// A close computed from a job that a replay reopened since changes
	// nothing: the reopened task stays queued, the job open.
	t.Run("StaleVersionAfterReopenChangesNothing", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{ToleratedFailures: 1, ToleratedFailurePercent: 50}}, 2)
		relayAll(t, s)
		apply(t, s, completed(job.ID, 1, `1`), failed(job.ID, 2, "boom"))
		read := getJob(t, s, job.ID)
		require.True(t, store.ReadyToClose(read))

		_, ok, err := s.ReopenTask(t.Context(), job.ID, 2)
		require.NoError(t, err)
		require.True(t, ok)
		reopened := getJob(t, s, job.ID)
		require.Greater(t, reopened.Version, read.Version, "a reopen moves the version")

		ok, err = s.FinishJob(t.Context(), job.ID, read.Version, warren.JobCompleted, []byte(`[1,null]`), "")
		require.NoError(t, err)
		require.False(t, ok, "the job moved since the close read it")
		requireSameJob(t, reopened, getJob(t, s, job.ID))
		require.Equal(t, []warren.TaskState{warren.TaskCompleted, warren.TaskQueued}, taskStates(t, s, job.ID))
		_, err = s.JobResult(t.Context(), job.ID)
		require.ErrorIs(t, err, warren.ErrNotFound)
	})

	// A close computed before another server closed and redrove the job
	// changes nothing: the redriven tasks stay pending.
	t.Run("StaleVersionAfterRedriveChangesNothing", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 2)
		relayAll(t, s)
		apply(t, s, completed(job.ID, 1, `1`), failed(job.ID, 2, "boom"))
		read := getJob(t, s, job.ID)
		finish(t, s, job.ID, warren.JobFailed, nil, "1 of 2 tasks failed")
		_, n, err := s.RedriveJob(t.Context(), job.ID)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		redriven := getJob(t, s, job.ID)

		ok, err := s.FinishJob(t.Context(), job.ID, read.Version, warren.JobFailed, nil, "1 of 2 tasks failed")
		require.NoError(t, err)
		require.False(t, ok)
		requireSameJob(t, redriven, getJob(t, s, job.ID))
		require.Equal(t, []warren.TaskState{warren.TaskCompleted, warren.TaskPending}, taskStates(t, s, job.ID))
	})

	// Every change to a job's counters or state moves its version, so that
	// a close computed before it is refused.
	t.Run("EveryChangeMovesTheVersion", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{TaskTimeout: time.Second}}, 3)
		last := getJob(t, s, job.ID).Version
		moved := func(what string) {
			t.Helper()
			v := getJob(t, s, job.ID).Version
			require.Greater(t, v, last, "%s moves the version", what)
			last = v
		}
		relayAll(t, s)
		moved("the relay starting the job")
		apply(t, s, completed(job.ID, 1, `1`))
		moved("a completed outcome")
		apply(t, s, completed(job.ID, 1, `1`))
		require.Equal(t, last, getJob(t, s, job.ID).Version, "a duplicate changes nothing")
		apply(t, s, failed(job.ID, 2, "boom"))
		moved("a failed outcome")
		_, ok, err := s.ReopenTask(t.Context(), job.ID, 2)
		require.NoError(t, err)
		require.True(t, ok)
		moved("a reopen")
		report, err := s.ReconcileStale(t.Context(), store.Staleness{Now: time.Now().Add(time.Hour)}, 0)
		require.NoError(t, err)
		require.Equal(t, 2, report.Failed)
		moved("the reconciler failing lost tasks")
		finish(t, s, job.ID, warren.JobFailed, nil, "2 of 3 tasks failed")
		moved("a close")
		_, _, err = s.RedriveJob(t.Context(), job.ID)
		require.NoError(t, err)
		moved("a redrive")
		_, err = s.CancelJob(t.Context(), job.ID)
		require.NoError(t, err)
		moved("a cancel")
	})
}

func testScanResults(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("TaskOrderWhateverTheApplyOrder", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		const n = 20
		job := newJob(t, s, n)
		relayAll(t, s)
		var outcomes []store.Outcome
		for i := int64(1); i <= n; i++ {
			if i%4 == 0 {
				outcomes = append(outcomes, failed(job.ID, i, "boom"))
			} else {
				outcomes = append(outcomes, completed(job.ID, i, string(payload(i))))
			}
		}
		rand.New(rand.NewPCG(7, 7)).Shuffle(len(outcomes), func(i, j int) {
			outcomes[i], outcomes[j] = outcomes[j], outcomes[i]
		})
		for len(outcomes) > 0 {
			batch := outcomes[:min(3, len(outcomes))]
			outcomes = outcomes[len(batch):]
			require.Equal(t, len(batch), apply(t, s, batch...).Applied)
		}

		want := int64(1)
		err := s.ScanResults(t.Context(), job.ID, func(taskID int64, state warren.TaskState, result json.RawMessage) error {
			require.Equal(t, want, taskID)
			if taskID%4 == 0 {
				require.Equal(t, warren.TaskFailed, state)
				require.Empty(t, result)
			} else {
				require.Equal(t, warren.TaskCompleted, state)
				require.JSONEq(t, string(payload(taskID)), string(result))
			}
			want++
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, int64(n+1), want, "every task was scanned")
	})

	t.Run("UnfinishedTasksOfAClosedJob", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 3)
		apply(t, s, completed(job.ID, 2, `"two"`))
		ok, err := s.FinishJob(t.Context(), job.ID, getJob(t, s, job.ID).Version, warren.JobFailed, nil, "stopped")
		require.NoError(t, err)
		require.True(t, ok)

		var states []warren.TaskState
		err = s.ScanResults(t.Context(), job.ID, func(taskID int64, state warren.TaskState, result json.RawMessage) error {
			states = append(states, state)
			if taskID == 2 {
				require.JSONEq(t, `"two"`, string(result))
			} else {
				require.Empty(t, result)
			}
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, []warren.TaskState{warren.TaskCancelled, warren.TaskCompleted, warren.TaskCancelled}, states)
	})

	t.Run("StopsAtFnError", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 10)
		errStop := errors.New("stop")
		var calls int
		err := s.ScanResults(t.Context(), job.ID, func(int64, warren.TaskState, json.RawMessage) error {
			calls++
			if calls == 3 {
				return errStop
			}
			return nil
		})
		require.ErrorIs(t, err, errStop)
		require.Equal(t, 3, calls)
	})
}

func testJobErrors(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("FailedTasksInTaskOrder", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 10)
		clean := newJob(t, s, 2)
		relayAll(t, s)
		apply(t, s, failed(job.ID, 9, "e9"), completed(job.ID, 1, `1`), failed(job.ID, 2, "e2"))
		apply(t, s, failed(job.ID, 7, "e7"), failed(job.ID, 5, "e5"), completed(clean.ID, 1, `1`))

		errs, err := s.JobErrors(t.Context(), job.ID, 3)
		require.NoError(t, err)
		require.Equal(t, []warren.TaskError{{TaskID: 2, Error: "e2"}, {TaskID: 5, Error: "e5"}, {TaskID: 7, Error: "e7"}}, errs)

		errs, err = s.JobErrors(t.Context(), job.ID, 10)
		require.NoError(t, err)
		require.Len(t, errs, 4)
		require.Equal(t, warren.TaskError{TaskID: 9, Error: "e9"}, errs[3])

		errs, err = s.JobErrors(t.Context(), clean.ID, 10)
		require.NoError(t, err)
		require.Empty(t, errs)
	})

	t.Run("NoLimitMeansDefaultPageSize", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		const tasks = store.DefaultPageSize + 1
		job := newJob(t, s, tasks)
		relayAll(t, s)
		var outcomes []store.Outcome
		for i := int64(1); i <= tasks; i++ {
			outcomes = append(outcomes, failed(job.ID, i, "e"+strconv.FormatInt(i, 10)))
		}
		apply(t, s, outcomes...)

		for _, limit := range []int{0, -1} {
			errs, err := s.JobErrors(t.Context(), job.ID, limit)
			require.NoError(t, err)
			require.Len(t, errs, store.DefaultPageSize, "limit %d means store.DefaultPageSize", limit)
			require.Equal(t, warren.TaskError{TaskID: 1, Error: "e1"}, errs[0])
			require.Equal(t, warren.TaskError{TaskID: store.DefaultPageSize, Error: "e100"}, errs[len(errs)-1])
		}
	})

	t.Run("UnknownJobIsNotFound", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		newJob(t, s, 1)
		_, err := s.JobErrors(t.Context(), "no-such-job", 10)
		require.ErrorIs(t, err, warren.ErrNotFound)
	})
}
