package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// reduceJob creates a job of n tasks with a reduce task of type "sum"
// on queue "reducers" with payload {"k":1}, and policy's other fields.
func reduceJob(t *testing.T, s store.Store, policy warren.Policy, n int) warren.Job {
	t.Helper()
	policy.ReduceTask = &warren.ReduceTask{Type: "sum", Queue: "reducers", Payload: json.RawMessage(`{"k":1}`)}
	return createJob(t, s, store.NewJob{Policy: policy}, n)
}

func testReduce(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("CreateJobKeepsTheReduceTask", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := reduceJob(t, s, warren.Policy{}, 2)
		got := getJob(t, s, job.ID)
		require.Equal(t, &warren.ReduceTask{Type: "sum", Queue: "reducers", Payload: json.RawMessage(`{"k":1}`)}, got.Policy.ReduceTask)
		require.Empty(t, got.ReduceState, "no reduce task started")
		require.Equal(t, "reducers", got.Policy.ReduceQueue())
		plain := newJob(t, s, 1)
		require.Nil(t, getJob(t, s, plain.ID).Policy.ReduceTask)
	})
	testReduceTasks(t, newStore)
}

// mappedJob creates a reduce job of n tasks with policy, publishes them
// and records their outcomes: the ids of failing fail, the rest
// completed with their id as result. It returns the job as it is then.
func mappedJob(t *testing.T, s store.Store, policy warren.Policy, n int, failing ...int64) warren.Job {
	t.Helper()
	job := reduceJob(t, s, policy, n)
	relayAll(t, s)
	var outcomes []store.Outcome
	for i := int64(1); i <= int64(n); i++ {
		if slices.Contains(failing, i) {
			outcomes = append(outcomes, failed(job.ID, i, "boom"))
		} else {
			outcomes = append(outcomes, completed(job.ID, i, strconv.FormatInt(i, 10)))
		}
	}
	apply(t, s, outcomes...)
	return getJob(t, s, job.ID)
}

// startReduce starts job's reduce at its version and fails unless it
// started; it returns the job as it is then.
func startReduce(t *testing.T, s store.Store, job warren.Job) warren.Job {
	t.Helper()
	ok, err := s.StartReduce(t.Context(), job.ID, job.Version)
	require.NoError(t, err)
	require.True(t, ok, "the reduce starts")
	return getJob(t, s, job.ID)
}

// reducing creates a mapped job of n tasks and starts its reduce, and
// relays its reduce task; it returns the job as it is then.
func reducing(t *testing.T, s store.Store, policy warren.Policy, n int) warren.Job {
	t.Helper()
	job := startReduce(t, s, mappedJob(t, s, policy, n))
	offered := relayAll(t, s)
	require.Len(t, offered, 1)
	require.Equal(t, warren.ReduceTaskID, offered[0].TaskID)
	return getJob(t, s, job.ID)
}

// reduceOutcome is an outcome of job's reduce task at generation.
func reduceOutcome(jobID string, state warren.TaskState, generation int) store.Outcome {
	o := completed(jobID, warren.ReduceTaskID, `"reduced"`)
	if state == warren.TaskFailed {
		o = failed(jobID, warren.ReduceTaskID, "reduce failed")
	}
	o.Generation = generation
	return o
}

// scanOutcomes returns every outcome ScanOutcomes gives of job after.
func scanOutcomes(t *testing.T, s store.Store, jobID string, after int64) []warren.TaskOutcome {
	t.Helper()
	var all []warren.TaskOutcome
	require.NoError(t, s.ScanOutcomes(t.Context(), jobID, after, func(o warren.TaskOutcome) error {
		all = append(all, o)
		return nil
	}))
	return all
}

func testReduceTasks(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("StartReduceMakesTaskZeroPending", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := mappedJob(t, s, warren.Policy{}, 3)
		require.True(t, store.ReadyToClose(job), "ready: the reduce may start")
		toClose, err := s.JobsToClose(t.Context(), 10)
		require.NoError(t, err)
		require.Equal(t, []string{job.ID}, toClose, "a job ready to reduce is listed as ready")

		got := startReduce(t, s, job)
		require.Equal(t, warren.ReduceRunning, got.ReduceState)
		require.Greater(t, got.Version, job.Version, "the version moves")
		require.True(t, got.Reducing())
		require.False(t, store.ReadyToClose(got), "not ready while it reduces")
		require.Equal(t, job.CompletedTasks, got.CompletedTasks, "no counter moves")
		require.Equal(t, job.ExpectedTasks, got.ExpectedTasks, "no counter moves")
		toClose, err = s.JobsToClose(t.Context(), 10)
		require.NoError(t, err)
		require.Empty(t, toClose, "a reducing job is not ready")

		task0, err := s.GetTask(t.Context(), job.ID, warren.ReduceTaskID)
		require.NoError(t, err)
		require.Equal(t, warren.TaskPending, task0.State)
		require.Equal(t, 1, task0.Generation)
		require.Zero(t, task0.Attempts)
		tasks := allTasks(t, s, job.ID, "")
		require.Equal(t, []int64{0, 1, 2, 3}, taskIDs(tasks), "ListTasks lists the reduce task first")

		ok, err := s.StartReduce(t.Context(), job.ID, got.Version)
		require.NoError(t, err)
		require.False(t, ok, "reducing already")
		ok, err = s.StartReduce(t.Context(), job.ID, job.Version)
		require.NoError(t, err)
		require.False(t, ok, "at an old version")
		require.Equal(t, got, getJob(t, s, job.ID), "a refused start changes nothing")
		_, err = s.StartReduce(t.Context(), "no-such-job", 1)
		require.ErrorIs(t, err, warren.ErrNotFound)
	})

	t.Run("StartReduceRefusesAJobNotToReduce", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		notReady := reduceJob(t, s, warren.Policy{}, 2)
		relayAll(t, s)
		apply(t, s, completed(notReady.ID, 1, `1`))
		overTolerance := mappedJob(t, s, warren.Policy{}, 2, 2)
		failFast := reduceJob(t, s, warren.Policy{FailFast: true}, 3)
		relayAll(t, s)
		apply(t, s, failed(failFast.ID, 1, "boom"))
		plain := newJob(t, s, 1)
		relayAll(t, s)
		apply(t, s, completed(plain.ID, 1, `1`))
		cancelled := mappedJob(t, s, warren.Policy{}, 1)
		_, err := s.CancelJob(t.Context(), cancelled.ID)
		require.NoError(t, err)
		for name, id := range map[string]string{"tasks left": notReady.ID, "over tolerance": overTolerance.ID,
			"fail-fast over tolerance": failFast.ID, "no reduce task": plain.ID, "closed": cancelled.ID} {
			before := getJob(t, s, id)
			ok, err := s.StartReduce(t.Context(), id, before.Version)
			require.NoError(t, err, name)
			require.False(t, ok, name)
			require.Equal(t, before, getJob(t, s, id), name)
			_, err = s.GetTask(t.Context(), id, warren.ReduceTaskID)
			require.ErrorIs(t, err, warren.ErrNotFound, "%s: no reduce task", name)
		}
	})

	t.Run("StartReduceWithinTolerance", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := mappedJob(t, s, warren.Policy{ToleratedFailures: 1, ToleratedFailurePercent: 100}, 3, 2)
		require.Equal(t, warren.ReduceRunning, startReduce(t, s, job).ReduceState)
	})

	t.Run("RelayClaimsTheReduceTaskAlone", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := startReduce(t, s, mappedJob(t, s, warren.Policy{Queue: "maps", MaxRetries: 2, BatchSize: 10}, 3))
		other := createJob(t, s, store.NewJob{Type: "other", Policy: warren.Policy{Queue: "maps", BatchSize: 10}}, 2)
		var rounds [][]store.OutboxTask
		_, err := s.RelayBatch(t.Context(), 100, func(ctx context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
			rounds = append(rounds, tasks)
			return publishAll(ctx, tasks)
		})
		require.NoError(t, err)
		require.Len(t, rounds, 1)
		var reduce []store.OutboxTask
		for _, task := range rounds[0] {
			if task.JobID == job.ID {
				reduce = append(reduce, task)
			} else {
				require.Equal(t, other.ID, task.JobID)
				require.Equal(t, "maps", task.Queue)
			}
		}
		require.Len(t, reduce, 1, "the reduce job's one pending task")
		r := reduce[0]
		require.Equal(t, warren.ReduceTaskID, r.TaskID)
		require.Equal(t, "sum", r.Type, "the reduce task's type")
		require.Equal(t, "reducers", r.Queue, "the reduce queue")
		require.Equal(t, 1, r.BatchSize, "never batched")
		require.Equal(t, int64(3), r.ExpectedTasks, "the message says how many map tasks there are")
		require.Equal(t, 1, r.Generation)
		require.Equal(t, 2, r.MaxRetries)
		require.JSONEq(t, `{"k":1}`, string(r.Payload))
		require.Equal(t, warren.TaskQueued, task(t, s, job.ID, warren.ReduceTaskID).State)
		require.Equal(t, warren.JobRunning, getJob(t, s, job.ID).State)
	})

	t.Run("RelayServesAReduceTaskOnTheJobsQueueByDefault", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{Queue: "maps",
			ReduceTask: &warren.ReduceTask{Type: "sum"}}}, 1)
		relayAll(t, s)
		apply(t, s, completed(job.ID, 1, `1`))
		startReduce(t, s, getJob(t, s, job.ID))
		offered := relayAll(t, s)
		require.Len(t, offered, 1)
		require.Equal(t, "maps", offered[0].Queue)
		require.Equal(t, "null", string(offered[0].Payload), "no payload is JSON null")
	})

	t.Run("ReduceOutcomeIsAppliedOnce", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := reducing(t, s, warren.Policy{}, 2)

		report := apply(t, s, reduceOutcome(job.ID, warren.TaskCompleted, 2))
		require.Equal(t, 1, report.Duplicates, "another generation")
		require.Empty(t, report.ReadyToClose)

		report = apply(t, s, reduceOutcome(job.ID, warren.TaskCompleted, 1), reduceOutcome(job.ID, warren.TaskFailed, 1))
		require.Equal(t, 1, report.Applied)
		require.Equal(t, 1, report.Duplicates, "the second outcome of the batch")
		require.Equal(t, []string{job.ID}, report.ReadyToClose)
		got := getJob(t, s, job.ID)
		require.Equal(t, warren.ReduceCompleted, got.ReduceState)
		require.Greater(t, got.Version, job.Version)
		require.Equal(t, job.CompletedTasks, got.CompletedTasks, "no counter moves")
		require.Equal(t, job.FailedTasks, got.FailedTasks, "no counter moves")
		require.True(t, store.ReadyToClose(got))
		toClose, err := s.JobsToClose(t.Context(), 10)
		require.NoError(t, err)
		require.Equal(t, []string{job.ID}, toClose)
		task0 := task(t, s, job.ID, warren.ReduceTaskID)
		require.Equal(t, warren.TaskCompleted, task0.State)
		require.JSONEq(t, `"reduced"`, string(task0.Result))

		report = apply(t, s, reduceOutcome(job.ID, warren.TaskFailed, 0))
		require.Equal(t, 1, report.Duplicates, "already recorded")
		require.Empty(t, report.ReadyToClose, "listed once")

		ok, err := s.StartReduce(t.Context(), job.ID, got.Version)
		require.NoError(t, err)
		require.False(t, ok, "reduced already")

		closed, err := s.FinishJob(t.Context(), job.ID, got.Version, warren.JobCompleted, []byte(`"reduced"`), "")
		require.NoError(t, err)
		require.True(t, closed, "a reduced job closes")
		require.Equal(t, warren.TaskCompleted, task(t, s, job.ID, warren.ReduceTaskID).State, "its reduce task as it was")
	})

	t.Run("ReduceOutcomeWithoutAReduceTaskIsUnknown", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := mappedJob(t, s, warren.Policy{}, 1)
		report := apply(t, s, reduceOutcome(job.ID, warren.TaskCompleted, 0))
		require.Equal(t, []int{0}, report.Unknown, "no reduce task row")
		plain := newJob(t, s, 1)
		report = apply(t, s, reduceOutcome(plain.ID, warren.TaskCompleted, 0))
		require.Equal(t, []int{0}, report.Unknown)
	})

	t.Run("ReduceFailureMakesTheJobReady", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := reducing(t, s, warren.Policy{}, 2)
		report := apply(t, s, reduceOutcome(job.ID, warren.TaskFailed, 1))
		require.Equal(t, 1, report.AppliedFailed)
		require.Equal(t, []string{job.ID}, report.ReadyToClose)
		got := getJob(t, s, job.ID)
		require.Equal(t, warren.ReduceFailed, got.ReduceState)
		require.Zero(t, got.FailedTasks, "no counter moves")
		errs, err := s.JobErrors(t.Context(), job.ID, 10)
		require.NoError(t, err)
		require.Equal(t, []warren.TaskError{{TaskID: 0, Error: "reduce failed"}}, errs, "the reduce task's error is the job's")
	})

	t.Run("ReconcilerRequeuesThenFailsALostReduceTask", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := reducing(t, s, warren.Policy{MaxRetries: 1}, 2)
		requireReconciled(t, reconcile(t, s, time.Now().Add(2*time.Hour), 10), 1, 0, nil, "requeued as any task")
		task0 := task(t, s, job.ID, warren.ReduceTaskID)
		require.Equal(t, warren.TaskPending, task0.State)
		require.Equal(t, 2, task0.Generation)
		offered := relayAll(t, s)
		require.Len(t, offered, 1)
		require.Equal(t, "sum", offered[0].Type)
		requireReconciled(t, reconcile(t, s, time.Now().Add(2*time.Hour), 10), 0, 1, []string{job.ID}, "failed as lost")
		got := getJob(t, s, job.ID)
		require.Equal(t, warren.ReduceFailed, got.ReduceState)
		require.Zero(t, got.FailedTasks, "no counter moves")
		require.Equal(t, int64(2), got.CompletedTasks)
		require.Equal(t, store.LostError, task(t, s, job.ID, warren.ReduceTaskID).Error)
	})

	t.Run("CancelDuringTheReduce", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := reducing(t, s, warren.Policy{}, 2)
		_, err := s.CancelJob(t.Context(), job.ID)
		require.NoError(t, err)
		require.Equal(t, warren.TaskCancelled, task(t, s, job.ID, warren.ReduceTaskID).State)
		report := apply(t, s, reduceOutcome(job.ID, warren.TaskCompleted, 1))
		require.Equal(t, 1, report.Closed)
	})

	t.Run("RedriveAfterAReduceFailureRunsTheReduceAgain", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := reducing(t, s, warren.Policy{}, 2)
		apply(t, s, reduceOutcome(job.ID, warren.TaskFailed, 1))
		failedJob := getJob(t, s, job.ID)
		ok, err := s.FinishJob(t.Context(), job.ID, failedJob.Version, warren.JobFailed, nil, "reduce failed")
		require.NoError(t, err)
		require.True(t, ok)

		redriven, requeued, err := s.RedriveJob(t.Context(), job.ID)
		require.NoError(t, err, "the reduce task is the job's only fault")
		require.Zero(t, requeued, "no map task to run again")
		require.Empty(t, redriven.ReduceState, "reset")
		require.Equal(t, warren.JobRunning, redriven.State)
		require.Equal(t, int64(2), redriven.CompletedTasks)
		require.Equal(t, warren.TaskFailed, task(t, s, job.ID, warren.ReduceTaskID).State, "its row as it was")
		require.Empty(t, relay(t, s, 100), "nothing to publish before the reduce starts again")

		got := startReduce(t, s, redriven)
		require.Equal(t, warren.ReduceRunning, got.ReduceState)
		task0 := task(t, s, job.ID, warren.ReduceTaskID)
		require.Equal(t, warren.TaskPending, task0.State)
		require.Equal(t, 2, task0.Generation, "the next generation")
		require.Zero(t, task0.Attempts)
		require.Empty(t, task0.Error)
		require.Nil(t, task0.FinishedAt)
		offered := relayAll(t, s)
		require.Len(t, offered, 1)
		require.Equal(t, 2, offered[0].Generation)
		require.Equal(t, 1, apply(t, s, reduceOutcome(job.ID, warren.TaskCompleted, 1)).Duplicates, "the first run's")
		require.Equal(t, []string{job.ID}, apply(t, s, reduceOutcome(job.ID, warren.TaskCompleted, 2)).ReadyToClose)
	})

	t.Run("RedriveOfAFailedMapTaskResetsTheReduce", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := mappedJob(t, s, warren.Policy{ToleratedFailures: 1, ToleratedFailurePercent: 100}, 2, 2)
		job = startReduce(t, s, job)
		relayAll(t, s)
		apply(t, s, reduceOutcome(job.ID, warren.TaskCompleted, 1))
		reduced := getJob(t, s, job.ID)
		ok, err := s.FinishJob(t.Context(), job.ID, reduced.Version, warren.JobCompleted, []byte(`1`), "")
		require.NoError(t, err)
		require.True(t, ok)

		redriven, requeued, err := s.RedriveJob(t.Context(), job.ID)
		require.NoError(t, err)
		require.Equal(t, 1, requeued, "the failed map task, never the reduce task")
		require.Empty(t, redriven.ReduceState)
		require.Zero(t, redriven.FailedTasks)
		require.Equal(t, warren.TaskCompleted, task(t, s, job.ID, warren.ReduceTaskID).State)
		offered := relayAll(t, s)
		require.Equal(t, []store.TaskRef{{JobID: job.ID, TaskID: 2}}, offeredRefs(offered))
	})

	t.Run("RedriveOfAReducedJobWithoutFaultsIsRefused", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := reducing(t, s, warren.Policy{}, 1)
		apply(t, s, reduceOutcome(job.ID, warren.TaskCompleted, 1))
		reduced := getJob(t, s, job.ID)
		ok, err := s.FinishJob(t.Context(), job.ID, reduced.Version, warren.JobCompleted, []byte(`1`), "")
		require.NoError(t, err)
		require.True(t, ok)
		_, _, err = s.RedriveJob(t.Context(), job.ID)
		require.ErrorIs(t, err, warren.ErrConflict)
	})

	t.Run("ReplayOfTheReduceTask", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := reducing(t, s, warren.Policy{}, 2)
		_, ok, err := s.ReopenTask(t.Context(), job.ID, warren.ReduceTaskID)
		require.NoError(t, err)
		require.False(t, ok, "not failed")
		apply(t, s, reduceOutcome(job.ID, warren.TaskFailed, 1))
		_, ok, err = s.ReopenTask(t.Context(), job.ID, warren.ReduceTaskID)
		require.NoError(t, err)
		require.False(t, ok, "the job has not failed yet")
		failedJob := getJob(t, s, job.ID)
		ok, err = s.FinishJob(t.Context(), job.ID, failedJob.Version, warren.JobFailed, nil, "reduce failed")
		require.NoError(t, err)
		require.True(t, ok)

		g, ok, err := s.ReopenTask(t.Context(), job.ID, warren.ReduceTaskID)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, 2, g)
		got := getJob(t, s, job.ID)
		require.Equal(t, warren.JobRunning, got.State)
		require.Equal(t, warren.ReduceRunning, got.ReduceState)
		require.Equal(t, int64(2), got.CompletedTasks)
		require.Zero(t, got.FailedTasks, "no counter moves")
		task0 := task(t, s, job.ID, warren.ReduceTaskID)
		require.Equal(t, warren.TaskQueued, task0.State, "the replay republishes it")
		require.Equal(t, 2, task0.Generation)
		require.Equal(t, []string{job.ID}, apply(t, s, reduceOutcome(job.ID, warren.TaskCompleted, 2)).ReadyToClose)
	})

	t.Run("UndoOfAReduceTaskReplay", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := reducing(t, s, warren.Policy{}, 2)
		apply(t, s, reduceOutcome(job.ID, warren.TaskFailed, 1))
		failedJob := getJob(t, s, job.ID)
		ok, err := s.FinishJob(t.Context(), job.ID, failedJob.Version, warren.JobFailed, nil, "reduce failed")
		require.NoError(t, err)
		require.True(t, ok)
		before := getJob(t, s, job.ID)

		r, err := s.ReopenTasks(t.Context(), job.ID, []int64{warren.ReduceTaskID})
		require.NoError(t, err)
		require.Len(t, r.Tasks, 1)
		ok, err = s.UndoReopen(t.Context(), r)
		require.NoError(t, err)
		require.True(t, ok)
		after := getJob(t, s, job.ID)
		before.Version = after.Version
		requireSameJob(t, before, after)
		require.Equal(t, warren.TaskFailed, task(t, s, job.ID, warren.ReduceTaskID).State)
	})

	t.Run("ReplayOfAMapTaskWaitsForTheReduce", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := mappedJob(t, s, warren.Policy{ToleratedFailures: 1, ToleratedFailurePercent: 100}, 2, 1)
		startReduce(t, s, job)
		_, ok, err := s.ReopenTask(t.Context(), job.ID, 1)
		require.NoError(t, err)
		require.False(t, ok, "the reduce reads the outcomes as they are")
	})

	t.Run("ScanOutcomes", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := reducing(t, s, warren.Policy{ToleratedFailures: 1, ToleratedFailurePercent: 100}, 5)
		all := scanOutcomes(t, s, job.ID, 0)
		require.Len(t, all, 5, "never the reduce task")
		for i, o := range all {
			require.Equal(t, int64(i+1), o.TaskID)
			require.Equal(t, warren.TaskCompleted, o.State)
			require.Equal(t, strconv.Itoa(i+1), string(o.Result))
		}
		require.Equal(t, all[3:], scanOutcomes(t, s, job.ID, 3), "after a task id")
		require.Empty(t, scanOutcomes(t, s, job.ID, 5))
		require.Equal(t, all, scanOutcomes(t, s, job.ID, -7), "after below 0 is all")

		var seen []int64
		stop := errors.New("stop")
		err := s.ScanOutcomes(t.Context(), job.ID, 0, func(o warren.TaskOutcome) error {
			seen = append(seen, o.TaskID)
			if len(seen) == 2 {
				return stop
			}
			return nil
		})
		require.ErrorIs(t, err, stop, "fn's error, as it is")
		require.Equal(t, []int64{1, 2}, seen)

		err = s.ScanOutcomes(t.Context(), "no-such-job", 0, func(warren.TaskOutcome) error { return nil })
		require.ErrorIs(t, err, warren.ErrNotFound)

		failing := mappedJob(t, s, warren.Policy{ToleratedFailures: 1, ToleratedFailurePercent: 100}, 2, 2)
		require.Equal(t, []warren.TaskOutcome{{TaskID: 1, State: warren.TaskCompleted, Result: json.RawMessage(`1`)},
			{TaskID: 2, State: warren.TaskFailed, Error: "boom"}}, scanOutcomes(t, s, failing.ID, 0))
	})

	t.Run("ScanOutcomesStreams", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := mappedJob(t, s, warren.Policy{}, 300)
		// A scan that stops at its first outcome reads no more: a
		// store that read every row first would still answer, so the
		// check is that stopping early returns at once with fn's error
		// after exactly one call.
		calls := 0
		stop := errors.New("stop")
		err := s.ScanOutcomes(t.Context(), job.ID, 0, func(warren.TaskOutcome) error {
			calls++
			return stop
		})
		require.ErrorIs(t, err, stop)
		require.Equal(t, 1, calls)
		require.Len(t, scanOutcomes(t, s, job.ID, 0), 300)
	})

	t.Run("GetTask", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := mappedJob(t, s, warren.Policy{}, 2)
		got, err := s.GetTask(t.Context(), job.ID, 2)
		require.NoError(t, err)
		require.Equal(t, job.ID, got.JobID)
		require.Equal(t, int64(2), got.TaskID)
		require.Equal(t, warren.TaskCompleted, got.State)
		require.Equal(t, 1, got.Generation)
		require.Equal(t, "w", got.Worker)
		listed := allTasks(t, s, job.ID, "")
		require.Equal(t, listed[1], got, "as ListTasks lists it")
		_, err = s.GetTask(t.Context(), job.ID, 3)
		require.ErrorIs(t, err, warren.ErrNotFound)
		_, err = s.GetTask(t.Context(), "no-such-job", 1)
		require.ErrorIs(t, err, warren.ErrNotFound)
	})

	t.Run("ResultsTimelineAndRetentionOfAReducedJob", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := reducing(t, s, warren.Policy{}, 2)
		apply(t, s, reduceOutcome(job.ID, warren.TaskCompleted, 1))
		var ids []int64
		require.NoError(t, s.ScanResults(t.Context(), job.ID, func(id int64, _ warren.TaskState, _ json.RawMessage) error {
			ids = append(ids, id)
			return nil
		}))
		require.Equal(t, []int64{1, 2}, ids, "ScanResults never gives the reduce task")
		now, err := s.Now(t.Context())
		require.NoError(t, err)
		span := store.TimelineSpan{Start: now.Add(-time.Hour), Bucket: 2 * time.Hour, N: 1}
		buckets, err := s.TaskTimeline(t.Context(), job.ID, span)
		require.NoError(t, err)
		require.Equal(t, int64(2), buckets[0].Completed, "the map tasks, as the counters")

		reduced := getJob(t, s, job.ID)
		ok, err := s.FinishJob(t.Context(), job.ID, reduced.Version, warren.JobCompleted, []byte(`1`), "")
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, s.DeleteJob(t.Context(), job.ID))
		for {
			n, err := s.PurgeDeletedTasks(t.Context(), 1)
			require.NoError(t, err)
			if n == 0 {
				break
			}
		}
		// The id is free again only once every task row, the reduce
		// task's too, is gone.
		again := createJob(t, s, store.NewJob{ID: job.ID, Policy: warren.Policy{ReduceTask: &warren.ReduceTask{Type: "sum"}}}, 1)
		require.Equal(t, []int64{1}, taskIDs(allTasks(t, s, again.ID, "")), "no task row of the deleted job is left")
		relayAll(t, s)
		apply(t, s, completed(again.ID, 1, `1`))
		startReduce(t, s, getJob(t, s, again.ID))
		require.Equal(t, 1, task(t, s, again.ID, warren.ReduceTaskID).Generation, "a new reduce task")
	})
}
