// Package storetest is the conformance suite every store.Store
// implementation must pass. It talks to a store only through the
// store.Store interface, so the same tests run against SQLite and
// PostgreSQL:
//
//	func TestStore(t *testing.T) {
//		storetest.Exercise(t, func(t *testing.T) store.Store {
//			s := openFreshStore(t) // migrated, isolated from every other store
//			t.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
//
// The suite includes a model-based test (subtest Model) that checks
// exactly-once accounting after random interleavings of outcomes, relay
// rounds, redrives, replays, cancels, reconciler passes and closes. A
// failing case prints its seed; run the suite again with ModelSeedEnv
// set to that seed to replay that case alone.
package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// Exercise runs the conformance suite as parallel subtests of t. Each
// subtest calls newStore for a fresh, migrated store that shares no jobs
// with any other; newStore registers its own cleanup. The subtests are
// parallel, so they run after Exercise returns, when t's function does.
func Exercise(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Helper()
	groups := []struct {
		name string
		run  func(t *testing.T, newStore func(t *testing.T) store.Store)
	}{
		{"Migrate", testMigrate},
		{"CreateJob", testCreateJob},
		{"GetJob", testGetJob},
		{"ListJobs", testListJobs},
		{"Search", testSearch},
		{"ListTasks", testListTasks},
		{"CancelJob", testCancelJob},
		{"RelayBatch", testRelayBatch},
		{"ApplyOutcomes", testApplyOutcomes},
		{"TaskAttempts", testTaskAttempts},
		{"JobsToClose", testJobsToClose},
		{"FinishJob", testFinishJob},
		{"ApplyOutcomesClosing", testApplyOutcomesClosing},
		{"JobResultRange", testJobResultRange},
		{"ScanResults", testScanResults},
		{"JobErrors", testJobErrors},
		{"TaskTimeline", testTaskTimeline},
		{"Counts", testCounts},
		{"TaskTimeout", testTaskTimeout},
		{"RedriveJob", testRedriveJob},
		{"ReopenTask", testReopenTask},
		{"Reopen", testReopen},
		{"ReconcileStale", testReconcileStale},
		{"Pause", testPause},
		{"Stale", testStale},
		{"Generations", testGenerations},
		{"Retention", testRetention},
		{"Webhooks", testWebhooks},
		{"Reduce", testReduce},
		{"Then", testThen},
		{"Spawn", testSpawn},
		{"SpawnParts", testSpawnParts},
		{"Model", testModel},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			g.run(t, newStore)
		})
	}
}

// payloads yields n task payloads {"i":1} ... {"i":n}.
func payloads(n int) iter.Seq2[json.RawMessage, error] {
	return func(yield func(json.RawMessage, error) bool) {
		for i := 1; i <= n; i++ {
			if !yield(payload(int64(i)), nil) {
				return
			}
		}
	}
}

// payload is the payload payloads yields for task id i.
func payload(i int64) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))
}

// createJob creates a job of n tasks from spec and returns it.
func createJob(t *testing.T, s store.Store, spec store.NewJob, n int) warren.Job {
	t.Helper()
	if spec.Type == "" {
		spec.Type = "test"
	}
	job, created, err := s.CreateJob(t.Context(), spec, payloads(n))
	require.NoError(t, err)
	require.True(t, created)
	return job
}

// newJob creates a job of n tasks with the default policy.
func newJob(t *testing.T, s store.Store, n int) warren.Job {
	t.Helper()
	return createJob(t, s, store.NewJob{}, n)
}

// getJob returns the stored job id.
func getJob(t *testing.T, s store.Store, id string) warren.Job {
	t.Helper()
	job, err := s.GetJob(t.Context(), id)
	require.NoError(t, err)
	return job
}

// publishAll is a publish func whose broker confirms every task.
func publishAll(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
	refs := make([]store.TaskRef, len(tasks))
	for i, task := range tasks {
		refs[i] = task.Ref()
	}
	return refs, nil
}

// relay runs one RelayBatch of limit whose broker confirms everything and
// returns the tasks it was offered.
func relay(t *testing.T, s store.Store, limit int) []store.OutboxTask {
	t.Helper()
	var offered []store.OutboxTask
	n, err := s.RelayBatch(t.Context(), limit, func(ctx context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		offered = append(offered, tasks...)
		return publishAll(ctx, tasks)
	})
	require.NoError(t, err)
	require.Equal(t, len(offered), n, "RelayBatch count: every offered task was confirmed")
	return offered
}

// relayAll publishes every pending task and returns them in offer order.
func relayAll(t *testing.T, s store.Store) []store.OutboxTask {
	t.Helper()
	var all []store.OutboxTask
	for {
		batch := relay(t, s, 1000)
		if len(batch) == 0 {
			return all
		}
		all = append(all, batch...)
	}
}

// offeredRefs lists the refs of tasks.
func offeredRefs(tasks []store.OutboxTask) []store.TaskRef {
	refs := make([]store.TaskRef, len(tasks))
	for i, task := range tasks {
		refs[i] = task.Ref()
	}
	return refs
}

// refs names tasks ids of job jobID.
func refs(jobID string, ids ...int64) []store.TaskRef {
	refs := make([]store.TaskRef, len(ids))
	for i, id := range ids {
		refs[i] = store.TaskRef{JobID: jobID, TaskID: id}
	}
	return refs
}

// completed is a completed outcome with result.
func completed(jobID string, taskID int64, result string) store.Outcome {
	o := store.Outcome{JobID: jobID, TaskID: taskID, State: warren.TaskCompleted, Attempts: 1, Worker: "w"}
	if result != "" {
		o.Result = json.RawMessage(result)
	}
	return o
}

// failed is a failed outcome with error msg.
func failed(jobID string, taskID int64, msg string) store.Outcome {
	return store.Outcome{JobID: jobID, TaskID: taskID, State: warren.TaskFailed, Error: msg, Attempts: 4, Worker: "w"}
}

// apply applies outcomes and returns the report.
func apply(t *testing.T, s store.Store, outcomes ...store.Outcome) store.ApplyReport {
	t.Helper()
	report, err := s.ApplyOutcomes(t.Context(), outcomes)
	require.NoError(t, err)
	return report
}

// allTasks pages through ListTasks of job id (every state when state is
// "") and returns every task.
func allTasks(t *testing.T, s store.Store, id string, state warren.TaskState) []warren.TaskRecord {
	t.Helper()
	var all []warren.TaskRecord
	opts := store.ListTasksOpts{State: state, Limit: 1000}
	for {
		page, next, err := s.ListTasks(t.Context(), id, opts)
		require.NoError(t, err)
		all = append(all, page...)
		if next == "" {
			return all
		}
		require.NotEmpty(t, page, "a page with a next cursor has tasks")
		opts.Cursor = next
	}
}

// taskStates returns the states of job id's tasks, indexed by task id - 1.
func taskStates(t *testing.T, s store.Store, id string) []warren.TaskState {
	t.Helper()
	tasks := allTasks(t, s, id, "")
	states := make([]warren.TaskState, len(tasks))
	for i, task := range tasks {
		require.Equal(t, int64(i+1), task.TaskID, "tasks are listed in task id order")
		states[i] = task.State
	}
	return states
}

// repeat returns n copies of state.
func repeat(state warren.TaskState, n int) []warren.TaskState {
	states := make([]warren.TaskState, n)
	for i := range states {
		states[i] = state
	}
	return states
}

// taskIDs lists the task ids of tasks.
func taskIDs(tasks []warren.TaskRecord) []int64 {
	ids := make([]int64, len(tasks))
	for i, task := range tasks {
		ids[i] = task.TaskID
	}
	return ids
}

// jobIDs lists the ids of jobs.
func jobIDs(jobs []warren.Job) []string {
	ids := make([]string, len(jobs))
	for i, job := range jobs {
		ids[i] = job.ID
	}
	return ids
}

// requireSameJob fails unless got is want as the store records it:
// timestamps equal to the microsecond, metadata equal as JSON.
func requireSameJob(t *testing.T, want, got warren.Job) {
	t.Helper()
	requireSameTime(t, &want.CreatedAt, &got.CreatedAt, "CreatedAt")
	requireSameTime(t, want.StartedAt, got.StartedAt, "StartedAt")
	requireSameTime(t, want.PublishedAt, got.PublishedAt, "PublishedAt")
	requireSameTime(t, want.LastFinishedAt, got.LastFinishedAt, "LastFinishedAt")
	requireSameTime(t, want.FinishedAt, got.FinishedAt, "FinishedAt")
	requireSameJSON(t, want.Metadata, got.Metadata, "Metadata")
	want.CreatedAt, want.StartedAt, want.PublishedAt, want.LastFinishedAt, want.FinishedAt, want.Metadata = time.Time{}, nil, nil, nil, nil, nil
	got.CreatedAt, got.StartedAt, got.PublishedAt, got.LastFinishedAt, got.FinishedAt, got.Metadata = time.Time{}, nil, nil, nil, nil, nil
	require.Equal(t, want, got)
}

// requireSameTime fails unless want and got are both nil or the same
// instant to the microsecond.
func requireSameTime(t *testing.T, want, got *time.Time, name string) {
	t.Helper()
	if want == nil {
		require.Nil(t, got, name)
		return
	}
	require.NotNil(t, got, name)
	require.WithinDuration(t, *want, *got, time.Microsecond, name)
}

// requireSameJSON fails unless want and got are both empty or equal JSON.
func requireSameJSON(t *testing.T, want, got []byte, name string) {
	t.Helper()
	if len(want) == 0 {
		require.Empty(t, got, name)
		return
	}
	require.JSONEq(t, string(want), string(got), name)
}

// requireRecent fails unless at is set and within a minute of the test's
// clock (the store's clock may be another machine's).
func requireRecent(t *testing.T, at *time.Time, name string) {
	t.Helper()
	require.NotNil(t, at, name)
	require.WithinDuration(t, time.Now(), *at, time.Minute, name)
}
