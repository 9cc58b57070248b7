package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

func TestCreateJobWritesJobAndTasks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	spec := store.NewJob{
		Type:           "resize",
		Policy:         warren.Policy{Reduce: "sum", MaxRetries: 5, ToleratedFailures: 2, ToleratedFailurePercent: 12.5, FailFast: true, BatchSize: 7},
		Metadata:       json.RawMessage(`{ "owner" : "me" }`),
		IdempotencyKey: "k1",
	}
	before := time.Now().UTC().Add(-time.Second)

	job, created, err := b.store.CreateJob(b.ctx, spec, payloads(3))
	require.NoError(t, err)
	require.True(t, created)

	require.Len(t, job.ID, 26, "a ULID")
	require.Equal(t, warren.JobPending, job.State)
	require.Equal(t, int64(3), job.ExpectedTasks)
	require.Equal(t, spec.Policy, job.Policy)
	require.Equal(t, spec.Metadata, job.Metadata, "metadata keeps its exact bytes")
	require.Equal(t, "k1", job.IdempotencyKey)
	require.Equal(t, time.UTC, job.CreatedAt.Location())
	require.True(t, job.CreatedAt.After(before))
	require.Nil(t, job.StartedAt)

	got, err := b.store.GetJob(b.ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, job, got)

	tasks, next, err := b.store.ListTasks(b.ctx, job.ID, store.ListTasksOpts{})
	require.NoError(t, err)
	require.Empty(t, next)
	require.Len(t, tasks, 3)
	for i, task := range tasks {
		require.Equal(t, int64(i+1), task.TaskID)
		require.Equal(t, warren.TaskPending, task.State)
	}
}

func TestCreateJobKeepsPayloadBytes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	payload := json.RawMessage(`{"b": 2,   "a": [1, 2.50, "\u00e9"]}`)
	one := func(yield func(json.RawMessage, error) bool) { yield(payload, nil) }

	_, _, err := b.store.CreateJob(b.ctx, store.NewJob{Type: "t"}, one)
	require.NoError(t, err)

	var got json.RawMessage
	_, err = b.store.RelayBatch(b.ctx, 10, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		got = tasks[0].Payload
		return nil, nil
	})
	require.NoError(t, err)
	require.Equal(t, string(payload), string(got))
}

func TestCreateJobIteratorErrorWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	errBoom := errors.New("boom")
	failing := func(yield func(json.RawMessage, error) bool) {
		for i := range 5000 {
			if !yield(json.RawMessage(fmt.Sprint(i)), nil) {
				return
			}
		}
		yield(nil, errBoom)
	}

	_, created, err := b.store.CreateJob(b.ctx, store.NewJob{Type: "t", IdempotencyKey: "k"}, failing)
	require.ErrorIs(t, err, errBoom)
	require.False(t, created)

	require.Equal(t, int64(0), count(t, b.url, `SELECT count(*) FROM jobs`))
	require.Equal(t, int64(0), count(t, b.url, `SELECT count(*) FROM tasks`))

	_, created, err = b.store.CreateJob(b.ctx, store.NewJob{Type: "t", IdempotencyKey: "k"}, payloads(2))
	require.NoError(t, err)
	require.True(t, created, "the failed attempt did not take the key")
}

func TestCreateJobIdempotencyKeyReturnsFirstJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first, created, err := b.store.CreateJob(b.ctx, store.NewJob{Type: "t", IdempotencyKey: "same"}, payloads(2))
	require.NoError(t, err)
	require.True(t, created)

	consumed := false
	never := func(yield func(json.RawMessage, error) bool) { consumed = true }
	again, created, err := b.store.CreateJob(b.ctx, store.NewJob{Type: "t", IdempotencyKey: "same"}, never)
	require.NoError(t, err)
	require.False(t, created)
	require.False(t, consumed, "tasks of a repeated submission are not consumed")
	require.Equal(t, first, again)
}

func TestCreateJobIdempotencyRaceBetweenServers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	servers := []store.Store{b.store, open(t, b.url), open(t, b.url), open(t, b.url)}

	var wg sync.WaitGroup
	jobs := make([]warren.Job, 16)
	createdBy := make([]bool, len(jobs))
	errs := make([]error, len(jobs))
	for i := range jobs {
		wg.Go(func() {
			jobs[i], createdBy[i], errs[i] = servers[i%len(servers)].CreateJob(b.ctx,
				store.NewJob{Type: "t", IdempotencyKey: "race"}, payloads(500))
		})
	}
	wg.Wait()

	creators := 0
	for i := range jobs {
		require.NoError(t, errs[i])
		require.Equal(t, jobs[0].ID, jobs[i].ID)
		if createdBy[i] {
			creators++
		}
	}
	require.Equal(t, 1, creators)
	require.Equal(t, int64(1), count(t, b.url, `SELECT count(*) FROM jobs`))
	require.Equal(t, int64(500), count(t, b.url, `SELECT count(*) FROM tasks`))
}

func TestCreateJobTakenIDConflicts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, _, err := b.store.CreateJob(b.ctx, store.NewJob{ID: "job-1", Type: "t"}, payloads(1))
	require.NoError(t, err)

	_, _, err = b.store.CreateJob(b.ctx, store.NewJob{ID: "job-1", Type: "t"}, payloads(1))
	require.ErrorIs(t, err, warren.ErrConflict)
}

func TestCreateJobRejectsInvalidPolicy(t *testing.T) {
	t.Parallel()
	b := setup(t)

	_, _, err := b.store.CreateJob(b.ctx, store.NewJob{Type: "t", Policy: warren.Policy{MaxRetries: -1}}, payloads(1))
	require.ErrorContains(t, err, "max_retries")
}

func TestCreateJob100k(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("100,000 tasks")
	}
	b := setup(t)
	start := time.Now()

	job := b.createJob(t, 100_000, defaultPolicy)

	t.Logf("CreateJob with 100,000 tasks: %v", time.Since(start))
	require.Equal(t, int64(100_000), job.ExpectedTasks)
	require.Equal(t, int64(100_000), count(t, b.url, `SELECT count(*) FROM tasks WHERE job_id = $1`, job.ID))
	require.Equal(t, int64(100_000), count(t, b.url, `SELECT max(task_id) FROM tasks WHERE job_id = $1`, job.ID))
}

func TestGetJobUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t)

	_, err := b.store.GetJob(b.ctx, "nope")
	require.ErrorIs(t, err, warren.ErrNotFound)
}

func TestListJobsNewestFirstWithCursor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ids []string
	for range 7 {
		ids = append(ids, b.createJob(t, 1, defaultPolicy).ID)
	}
	_, err := b.store.CancelJob(b.ctx, ids[2])
	require.NoError(t, err)

	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 4)
		jobs, next, err := b.store.ListJobs(b.ctx, store.ListJobsOpts{Limit: 3, Cursor: cursor})
		require.NoError(t, err)
		for _, j := range jobs {
			got = append(got, j.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	require.Equal(t, []string{ids[6], ids[5], ids[4], ids[3], ids[2], ids[1], ids[0]}, got)

	cancelled, next, err := b.store.ListJobs(b.ctx, store.ListJobsOpts{State: warren.JobCancelled})
	require.NoError(t, err)
	require.Empty(t, next)
	require.Len(t, cancelled, 1)
	require.Equal(t, ids[2], cancelled[0].ID)

	_, _, err = b.store.ListJobs(b.ctx, store.ListJobsOpts{Cursor: "garbage!"})
	require.ErrorContains(t, err, "invalid page cursor")
}

func TestListTasksPagesByTaskIDAndState(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job := b.createJob(t, 10, defaultPolicy)
	b.relayAll(t)
	_, err := b.store.ApplyOutcomes(b.ctx, []store.Outcome{completed(job.ID, 2), failed(job.ID, 5), completed(job.ID, 9)})
	require.NoError(t, err)

	page1, next, err := b.store.ListTasks(b.ctx, job.ID, store.ListTasksOpts{Limit: 4})
	require.NoError(t, err)
	require.NotEmpty(t, next)
	page2, next, err := b.store.ListTasks(b.ctx, job.ID, store.ListTasksOpts{Limit: 4, Cursor: next})
	require.NoError(t, err)
	require.NotEmpty(t, next)
	page3, next, err := b.store.ListTasks(b.ctx, job.ID, store.ListTasksOpts{Limit: 4, Cursor: next})
	require.NoError(t, err)
	require.Empty(t, next)
	require.Len(t, page1, 4)
	require.Len(t, page2, 4)
	require.Len(t, page3, 2)
	require.Equal(t, int64(5), page2[0].TaskID)
	require.Equal(t, int64(10), page3[1].TaskID)

	done, _, err := b.store.ListTasks(b.ctx, job.ID, store.ListTasksOpts{State: warren.TaskCompleted})
	require.NoError(t, err)
	require.Len(t, done, 2)
	require.Equal(t, int64(9), done[1].TaskID)
	require.JSONEq(t, `{"r":9}`, string(done[1].Result))
	require.Equal(t, "w1", done[1].Worker)
	require.Equal(t, 1, done[1].Attempts)
	require.NotNil(t, done[1].QueuedAt)
	require.NotNil(t, done[1].FinishedAt)

	_, _, err = b.store.ListTasks(b.ctx, "nope", store.ListTasksOpts{})
	require.ErrorIs(t, err, warren.ErrNotFound)
}

func TestJobErrorsInTaskOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job := b.createJob(t, 10, defaultPolicy)
	b.relayAll(t)
	_, err := b.store.ApplyOutcomes(b.ctx, []store.Outcome{failed(job.ID, 7), failed(job.ID, 3), completed(job.ID, 1), failed(job.ID, 5)})
	require.NoError(t, err)

	errs, err := b.store.JobErrors(b.ctx, job.ID, 2)
	require.NoError(t, err)
	require.Equal(t, []warren.TaskError{{TaskID: 3, Error: "boom 3"}, {TaskID: 5, Error: "boom 5"}}, errs)

	_, err = b.store.JobErrors(b.ctx, "nope", 2)
	require.ErrorIs(t, err, warren.ErrNotFound)
}

func TestCancelJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job := b.createJob(t, 4, defaultPolicy)
	_, err := b.store.RelayBatch(b.ctx, 2, publishAll)
	require.NoError(t, err)
	_, err = b.store.ApplyOutcomes(b.ctx, []store.Outcome{completed(job.ID, 1)})
	require.NoError(t, err)

	cancelled, err := b.store.CancelJob(b.ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, warren.JobCancelled, cancelled.State)
	require.NotNil(t, cancelled.FinishedAt)

	tasks, _, err := b.store.ListTasks(b.ctx, job.ID, store.ListTasksOpts{})
	require.NoError(t, err)
	states := []warren.TaskState{}
	for _, task := range tasks {
		states = append(states, task.State)
	}
	require.Equal(t, []warren.TaskState{warren.TaskCompleted, warren.TaskCancelled, warren.TaskCancelled, warren.TaskCancelled}, states)

	_, err = b.store.CancelJob(b.ctx, job.ID)
	require.ErrorIs(t, err, warren.ErrConflict)
	_, err = b.store.CancelJob(b.ctx, "nope")
	require.ErrorIs(t, err, warren.ErrNotFound)
}

func TestFinishJobConcurrentCallersExactlyOneWins(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job := b.createJob(t, 5, defaultPolicy)
	b.relayAll(t)
	_, err := b.store.ApplyOutcomes(b.ctx, []store.Outcome{completed(job.ID, 1), completed(job.ID, 2)})
	require.NoError(t, err)
	servers := []store.Store{b.store, open(t, b.url)}
	before, err := b.store.GetJob(b.ctx, job.ID)
	require.NoError(t, err)

	var wg sync.WaitGroup
	wins := make([]bool, 12)
	errs := make([]error, len(wins))
	for i := range wins {
		wg.Go(func() {
			wins[i], errs[i] = servers[i%2].FinishJob(b.ctx, job.ID, before.Version, warren.JobCompleted, []byte(fmt.Sprintf(`[%d]`, i)), "")
		})
	}
	wg.Wait()

	winner := -1
	for i := range wins {
		require.NoError(t, errs[i])
		if wins[i] {
			require.Equal(t, -1, winner, "a second caller closed the job")
			winner = i
		}
	}
	require.NotEqual(t, -1, winner)

	got, err := b.store.GetJob(b.ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, warren.JobCompleted, got.State)
	require.Equal(t, "/v1/jobs/"+job.ID+"/result", got.ResultLocation)
	require.NotNil(t, got.FinishedAt)
	result, err := b.store.JobResult(b.ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf(`[%d]`, winner), string(result))
	require.Equal(t, int64(3), count(t, b.url, `SELECT count(*) FROM tasks WHERE state = 'cancelled'`))
}

func TestFinishJobFailedWithoutResult(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job := b.createJob(t, 2, defaultPolicy)

	ok, err := finish(b.ctx, b.store, job.ID, warren.JobFailed, nil, "2 of 2 tasks failed")
	require.NoError(t, err)
	require.True(t, ok)

	got, err := b.store.GetJob(b.ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, warren.JobFailed, got.State)
	require.Equal(t, "2 of 2 tasks failed", got.Error)
	require.Empty(t, got.ResultLocation)
	_, err = b.store.JobResult(b.ctx, job.ID)
	require.ErrorIs(t, err, warren.ErrNotFound)

	_, err = b.store.FinishJob(b.ctx, "nope", 0, warren.JobFailed, nil, "")
	require.ErrorIs(t, err, warren.ErrNotFound)
	_, err = b.store.FinishJob(b.ctx, job.ID, 0, warren.JobRunning, nil, "")
	require.ErrorContains(t, err, "not a closed state")
}

func TestScanResultsStreamsInTaskOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job := b.createJob(t, 1000, defaultPolicy)
	b.relayAll(t)
	var outcomes []store.Outcome
	for id := int64(1000); id >= 1; id-- {
		if id%100 == 0 {
			outcomes = append(outcomes, failed(job.ID, id))
		} else {
			outcomes = append(outcomes, completed(job.ID, id))
		}
	}
	_, err := b.store.ApplyOutcomes(b.ctx, outcomes)
	require.NoError(t, err)

	next := int64(1)
	err = b.store.ScanResults(b.ctx, job.ID, func(taskID int64, state warren.TaskState, result json.RawMessage) error {
		require.Equal(t, next, taskID)
		if taskID%100 == 0 {
			require.Equal(t, warren.TaskFailed, state)
			require.Nil(t, result)
		} else {
			require.Equal(t, warren.TaskCompleted, state)
			require.Equal(t, fmt.Sprintf(`{"r":%d}`, taskID), string(result))
		}
		next++
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, int64(1001), next)

	errStop := errors.New("stop")
	err = b.store.ScanResults(b.ctx, job.ID, func(taskID int64, _ warren.TaskState, _ json.RawMessage) error {
		if taskID == 10 {
			return errStop
		}
		return nil
	})
	require.ErrorIs(t, err, errStop)

	err = b.store.ScanResults(b.ctx, "nope", func(int64, warren.TaskState, json.RawMessage) error { return nil })
	require.ErrorIs(t, err, warren.ErrNotFound)
}

// The contract does not say what a job without tasks is; this store creates
// it pending and finished, so the aggregator's sweep closes it.
func TestCreateJobWithoutTasksIsReadyToClose(t *testing.T) {
	t.Parallel()
	b := setup(t)

	job := b.createJob(t, 0, defaultPolicy)

	require.Equal(t, warren.JobPending, job.State)
	require.Zero(t, job.ExpectedTasks)
	ids, err := b.store.JobsToClose(b.ctx, 10)
	require.NoError(t, err)
	require.Equal(t, []string{job.ID}, ids)
	ok, err := finish(b.ctx, b.store, job.ID, warren.JobCompleted, []byte(`[]`), "")
	require.NoError(t, err)
	require.True(t, ok)
}
