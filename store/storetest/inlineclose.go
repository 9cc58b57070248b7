package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// decider is a store.CloseDecider that records what it was asked and
// answers with close (ok) or err.
type decider struct {
	close store.Closing
	ok    bool
	err   error
	// asked lists the jobs it was asked about, as they were passed, and
	// scanned the results each scan gave, as "task:state:result".
	asked   []warren.Job
	scanned [][]string
}

func (d *decider) decide(_ context.Context, job warren.Job, scan store.ResultScan) (store.Closing, bool, error) {
	d.asked = append(d.asked, job)
	var seen []string
	err := scan(func(taskID int64, state warren.TaskState, result json.RawMessage) error {
		seen = append(seen, string(payload(taskID))+":"+string(state)+":"+string(result))
		return nil
	})
	if err != nil {
		return store.Closing{}, false, err
	}
	d.scanned = append(d.scanned, seen)
	return d.close, d.ok, d.err
}

// applyClosing applies outcomes with ApplyOutcomesClosing and d.
func applyClosing(t *testing.T, s store.Store, d *decider, outcomes ...store.Outcome) store.ApplyReport {
	t.Helper()
	report, err := s.ApplyOutcomesClosing(t.Context(), outcomes, d.decide)
	require.NoError(t, err)
	return report
}

func testApplyOutcomesClosing(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("ClosesTheJobItsLastOutcomeMadeReady", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 3)
		relayAll(t, s)
		d := &decider{close: store.Closing{State: warren.JobCompleted, Result: []byte(`["a","b","c"]`)}, ok: true}

		r := applyClosing(t, s, d, completed(job.ID, 2, `"b"`), completed(job.ID, 1, `"a"`))
		require.Equal(t, 2, r.Applied)
		require.Empty(t, d.asked, "a job with a task left is not ready")
		require.Empty(t, r.ClosedJobs)
		require.Equal(t, map[string]int64{job.ID: 1}, r.Unfinished, "one task left")

		r = applyClosing(t, s, d, completed(job.ID, 3, `"c"`), completed(job.ID, 3, `"c"`))
		require.Equal(t, map[string]int64{job.ID: 0}, r.Unfinished)
		require.Equal(t, 1, r.Applied)
		require.Equal(t, 1, r.Duplicates)
		require.Len(t, d.asked, 1)
		asked := d.asked[0]
		require.Equal(t, job.ID, asked.ID)
		require.Equal(t, int64(3), asked.CompletedTasks, "the job as the batch left it")
		require.Equal(t, warren.JobRunning, asked.State)
		require.Equal(t, []string{`{"i":1}:completed:"a"`, `{"i":2}:completed:"b"`, `{"i":3}:completed:"c"`}, d.scanned[0],
			"the scan sees the batch's own outcome, in task id order")
		require.Empty(t, r.ReadyToClose, "a job closed in the batch is not left ready")
		require.Len(t, r.ClosedJobs, 1)
		require.Equal(t, job.ID, r.ClosedJobs[0].Job.ID)
		require.Equal(t, warren.JobCompleted, r.ClosedJobs[0].State)
		require.Equal(t, asked.Version, r.ClosedJobs[0].Job.Version)

		got := getJob(t, s, job.ID)
		require.Equal(t, warren.JobCompleted, got.State)
		requireRecent(t, got.FinishedAt, "FinishedAt")
		require.Greater(t, got.Version, asked.Version, "the close moved the version")
		result, err := s.JobResult(t.Context(), job.ID)
		require.NoError(t, err)
		require.JSONEq(t, `["a","b","c"]`, string(result))
		ids, err := s.JobsToClose(t.Context(), 0)
		require.NoError(t, err)
		require.NotContains(t, ids, job.ID)
		ok, err := s.FinishJob(t.Context(), job.ID, asked.Version, warren.JobFailed, nil, "late")
		require.NoError(t, err)
		require.False(t, ok, "closed once")

		r = applyClosing(t, s, d, completed(job.ID, 1, `"again"`))
		require.Equal(t, 1, r.Closed, "an outcome of the closed job")
		require.Len(t, d.asked, 1, "a closed job is never decided again")
	})

	t.Run("FailedWithItsError", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 1)
		relayAll(t, s)
		d := &decider{close: store.Closing{State: warren.JobFailed, Error: "1 of 1 tasks failed, over the tolerance"}, ok: true}
		r := applyClosing(t, s, d, failed(job.ID, 1, "boom"))
		require.Len(t, r.ClosedJobs, 1)
		require.Equal(t, warren.JobFailed, r.ClosedJobs[0].State)
		require.Equal(t, []string{`{"i":1}:failed:`}, d.scanned[0])
		got := getJob(t, s, job.ID)
		require.Equal(t, warren.JobFailed, got.State)
		require.Equal(t, "1 of 1 tasks failed, over the tolerance", got.Error)
		require.Empty(t, got.ResultLocation)
	})

	t.Run("DeclinedLeavesTheJobReady", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 2)
		relayAll(t, s)
		d := &decider{}
		r := applyClosing(t, s, d, completed(job.ID, 1, `1`), completed(job.ID, 2, `2`))
		require.Len(t, d.asked, 1)
		require.Empty(t, r.ClosedJobs)
		require.Equal(t, []string{job.ID}, r.ReadyToClose)
		require.Equal(t, warren.JobRunning, getJob(t, s, job.ID).State)
		ok, err := s.FinishJob(t.Context(), job.ID, getJob(t, s, job.ID).Version, warren.JobCompleted, []byte(`[1,2]`), "")
		require.NoError(t, err)
		require.True(t, ok, "FinishJob closes what the batch left")
	})

	t.Run("AnErrorWritesNothing", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 1)
		relayAll(t, s)
		before := getJob(t, s, job.ID)
		boom := errors.New("the reducer's scan broke")
		d := &decider{err: boom}
		_, err := s.ApplyOutcomesClosing(t.Context(), []store.Outcome{completed(job.ID, 1, `1`)}, d.decide)
		require.ErrorIs(t, err, boom)
		requireSameJob(t, before, getJob(t, s, job.ID))
		require.Equal(t, []warren.TaskState{warren.TaskQueued}, taskStates(t, s, job.ID), "the outcome is not recorded")
	})

	t.Run("OnlyJobsWithEveryTaskFinished", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		// Fail-fast: ready with one failure while two tasks are open; a
		// close there cancels tasks, which the batch must not do.
		ff := createJob(t, s, store.NewJob{Policy: warren.Policy{FailFast: true, MaxRetries: 3}}, 3)
		// A reduce task: its close starts the task instead.
		rt := createJob(t, s, store.NewJob{Policy: warren.Policy{ReduceTask: &warren.ReduceTask{Type: "sum"}}}, 1)
		// Over InlineCloseTasks: its reduce would hold the transaction.
		big := newJob(t, s, store.InlineCloseTasks+1)
		relayAll(t, s)
		d := &decider{close: store.Closing{State: warren.JobCompleted}, ok: true}
		outs := []store.Outcome{failed(ff.ID, 1, "boom"), completed(rt.ID, 1, `1`)}
		for i := int64(1); i <= store.InlineCloseTasks+1; i++ {
			outs = append(outs, completed(big.ID, i, `1`))
		}
		r := applyClosing(t, s, d, outs...)
		require.Empty(t, d.asked)
		require.Empty(t, r.ClosedJobs)
		require.ElementsMatch(t, []string{ff.ID, rt.ID, big.ID}, r.ReadyToClose)
	})

	t.Run("FollowUpAndWebhook", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Then: stage2(), Webhook: &store.Webhook{URL: "https://example.com/hook", Secret: "s"}}, 2)
		relayAll(t, s)
		d := &decider{close: store.Closing{State: warren.JobCompleted, Result: []byte(`[10, 20]`)}, ok: true}
		r := applyClosing(t, s, d, completed(job.ID, 1, `10`), completed(job.ID, 2, `20`))
		require.Len(t, r.ClosedJobs, 1)
		got := getJob(t, s, job.ID)
		require.Equal(t, warren.JobCompleted, got.State)
		require.NotEmpty(t, got.NextJob, "the close started the follow-up")
		next := getJob(t, s, got.NextJob)
		require.Equal(t, job.ID, next.PreviousJob)
		require.Equal(t, int64(2), next.ExpectedTasks)
		deliveries, err := s.ListDeliveries(t.Context(), job.ID)
		require.NoError(t, err)
		require.Len(t, deliveries, 1, "the close made the webhook delivery")
	})
}
