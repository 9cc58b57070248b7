package storetest

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// spawning is outcome o with a spawn of payloads {"c":"<tag>.1"} ...
// {"c":"<tag>.n"}.
func spawning(o store.Outcome, tag string, n int) store.Outcome {
	o.Spawn = nil
	for i := 1; i <= n; i++ {
		o.Spawn = append(o.Spawn, json.RawMessage(fmt.Sprintf(`{"c":%q}`, fmt.Sprintf("%s.%d", tag, i))))
	}
	return o
}

// relayedPayloads relays every pending task and returns the payloads
// of job id's, in the order offered (task id order), as strings.
func relayedPayloads(t *testing.T, s store.Store, id string) []string {
	t.Helper()
	var got []string
	for _, task := range relayAll(t, s) {
		if task.JobID == id {
			got = append(got, string(task.Payload))
		}
	}
	return got
}

func testSpawn(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("AddsPendingTasksAfterTheLast", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 2)
		relayAll(t, s)
		report := apply(t, s, spawning(completed(job.ID, 1, `1`), "a", 3))
		require.Equal(t, store.ApplyReport{Applied: 1, Spawned: 3, SpawnedJobs: []string{job.ID}}, withoutEmpty(report))
		got := getJob(t, s, job.ID)
		require.Equal(t, int64(5), got.ExpectedTasks, "expected_tasks grows by the spawn in the same transaction")
		require.Equal(t, int64(3), got.SpawnedTasks, "the spawned tasks are counted")
		require.Equal(t, int64(1), got.CompletedTasks)
		require.Equal(t, []warren.TaskState{warren.TaskCompleted, warren.TaskQueued,
			warren.TaskPending, warren.TaskPending, warren.TaskPending}, taskStates(t, s, job.ID))
		offered := relayAll(t, s)
		require.Equal(t, refs(job.ID, 3, 4, 5), offeredRefs(offered), "the relay publishes the children")
		for i, want := range []string{`{"c":"a.1"}`, `{"c":"a.2"}`, `{"c":"a.3"}`} {
			require.JSONEq(t, want, string(offered[i].Payload))
		}
	})

	t.Run("AnEmptyPayloadIsNull", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 1)
		relayAll(t, s)
		o := completed(job.ID, 1, `1`)
		o.Spawn = []json.RawMessage{nil, json.RawMessage(`[1, 2]`)}
		apply(t, s, o)
		require.Equal(t, []string{`null`, `[1, 2]`}, relayedPayloads(t, s, job.ID))
	})

	t.Run("ADuplicateAddsNothing", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 2)
		relayAll(t, s)
		o := spawning(completed(job.ID, 1, `1`), "a", 2)
		report := apply(t, s, o, o)
		require.Equal(t, 1, report.Duplicates, "the second copy in the batch is a duplicate")
		require.Equal(t, 2, report.Spawned)
		report = apply(t, s, o)
		require.Equal(t, store.ApplyReport{Duplicates: 1}, withoutEmpty(report), "a redelivered result adds nothing")
		require.Equal(t, int64(4), getJob(t, s, job.ID).ExpectedTasks)
		require.Len(t, allTasks(t, s, job.ID, ""), 4)
	})

	t.Run("AStaleGenerationAddsNothing", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 2)
		relayAll(t, s)
		o := spawning(completed(job.ID, 1, `1`), "a", 2)
		o.Generation = 7
		report := apply(t, s, o)
		require.Equal(t, store.ApplyReport{Duplicates: 1}, withoutEmpty(report))
		require.Equal(t, int64(2), getJob(t, s, job.ID).ExpectedTasks)
		require.Len(t, allTasks(t, s, job.ID, ""), 2)
	})

	t.Run("AFailedParentAddsNothing", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 2)
		relayAll(t, s)
		report := apply(t, s, spawning(failed(job.ID, 1, "boom"), "a", 2))
		require.Equal(t, store.ApplyReport{Applied: 1, AppliedFailed: 1}, withoutEmpty(report))
		require.Equal(t, int64(2), getJob(t, s, job.ID).ExpectedTasks)
		require.Equal(t, "boom", task(t, s, job.ID, 1).Error)
		require.Len(t, allTasks(t, s, job.ID, ""), 2)
	})

	t.Run("AClosedJobAddsNothing", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 2)
		relayAll(t, s)
		_, err := s.CancelJob(t.Context(), job.ID)
		require.NoError(t, err)
		report := apply(t, s, spawning(completed(job.ID, 1, `1`), "a", 2))
		require.Equal(t, store.ApplyReport{Closed: 1}, withoutEmpty(report))
		require.Equal(t, int64(2), getJob(t, s, job.ID).ExpectedTasks)
		require.Len(t, allTasks(t, s, job.ID, ""), 2)
	})

	t.Run("ParentsOfOneBatchGetRangesInBatchOrder", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job, other := newJob(t, s, 3), newJob(t, s, 1)
		relayAll(t, s)
		report := apply(t, s,
			spawning(completed(job.ID, 2, `2`), "two", 2),
			spawning(completed(other.ID, 1, `1`), "other", 1),
			completed(job.ID, 3, `3`),
			spawning(completed(job.ID, 1, `1`), "one", 1))
		require.Equal(t, 4, report.Spawned)
		require.ElementsMatch(t, []string{job.ID, other.ID}, report.SpawnedJobs)
		byJob := make(map[string][]string)
		for _, task := range relayAll(t, s) {
			byJob[task.JobID] = append(byJob[task.JobID], fmt.Sprintf("%d %s", task.TaskID, task.Payload))
		}
		require.Equal(t, []string{`4 {"c":"two.1"}`, `5 {"c":"two.2"}`, `6 {"c":"one.1"}`}, byJob[job.ID])
		require.Equal(t, []string{`2 {"c":"other.1"}`}, byJob[other.ID])
		got := getJob(t, s, job.ID)
		require.Equal(t, int64(6), got.ExpectedTasks)
		require.Equal(t, int64(3), got.CompletedTasks)
	})

	t.Run("AChildSpawnsInTurn", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 1)
		relayAll(t, s)
		apply(t, s, spawning(completed(job.ID, 1, `1`), "child", 1))
		require.Equal(t, refs(job.ID, 2), offeredRefs(relayAll(t, s)))
		apply(t, s, spawning(completed(job.ID, 2, `2`), "grandchild", 2))
		require.Equal(t, refs(job.ID, 3, 4), offeredRefs(relayAll(t, s)))
		report := apply(t, s, completed(job.ID, 3, `3`), completed(job.ID, 4, `4`))
		require.Equal(t, []string{job.ID}, report.ReadyToClose, "every task of the tree finished: ready")
		var ids []int64
		for _, o := range scanOutcomes(t, s, job.ID, 0) {
			ids = append(ids, o.TaskID)
		}
		require.Equal(t, []int64{1, 2, 3, 4}, ids, "outcomes are scanned in task id order")
	})

	t.Run("NotReadyWhileChildrenArePending", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 1)
		relayAll(t, s)
		report := apply(t, s, spawning(completed(job.ID, 1, `1`), "a", 1))
		require.Empty(t, report.ReadyToClose, "the last task spawned: the job is not ready")
		toClose, err := s.JobsToClose(t.Context(), 10)
		require.NoError(t, err)
		require.NotContains(t, toClose, job.ID)
		require.False(t, store.ReadyToClose(getJob(t, s, job.ID)))
		relayAll(t, s)
		report = apply(t, s, completed(job.ID, 2, `2`))
		require.Equal(t, []string{job.ID}, report.ReadyToClose)
	})

	t.Run("OverTheJobLimitFailsTheParent", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 2)
		relayAll(t, s)
		o := spawning(completed(job.ID, 1, `1`), "a", 3)
		o.MaxJobTasks = 4
		report := apply(t, s, o)
		require.Equal(t, store.ApplyReport{Applied: 1, AppliedFailed: 1, SpawnRefused: 1}, withoutEmpty(report))
		parent := task(t, s, job.ID, 1)
		require.Equal(t, warren.TaskFailed, parent.State)
		require.Contains(t, parent.Error, "over the limit of 4 tasks per job")
		require.Empty(t, parent.Result)
		got := getJob(t, s, job.ID)
		require.Equal(t, int64(2), got.ExpectedTasks)
		require.Equal(t, int64(1), got.FailedTasks)
		require.Len(t, allTasks(t, s, job.ID, ""), 2)

		o = spawning(completed(job.ID, 2, `2`), "b", 2)
		o.MaxJobTasks = 4
		apply(t, s, o)
		require.Equal(t, int64(4), getJob(t, s, job.ID).ExpectedTasks, "up to the limit is allowed")
	})

	t.Run("AnOversizedOrInvalidPayloadFailsTheParent", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 2)
		relayAll(t, s)
		big := completed(job.ID, 1, `1`)
		big.Spawn = []json.RawMessage{json.RawMessage(`"ok"`), json.RawMessage(`"0123456789"`)}
		big.MaxTaskBytes = 8
		bad := completed(job.ID, 2, `2`)
		bad.Spawn = []json.RawMessage{json.RawMessage(`{"open":`)}
		report := apply(t, s, big, bad)
		require.Equal(t, 2, report.SpawnRefused)
		require.Contains(t, task(t, s, job.ID, 1).Error, "spawned task 1's payload is 12 bytes, over the limit of 8 bytes")
		require.Contains(t, task(t, s, job.ID, 2).Error, "spawned task 0's payload is not JSON")
		require.Equal(t, int64(2), getJob(t, s, job.ID).ExpectedTasks)
	})

	t.Run("AReduceTaskCannotSpawn", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := reducing(t, s, warren.Policy{}, 2)
		o := spawning(reduceOutcome(job.ID, warren.TaskCompleted, 0), "r", 1)
		report := apply(t, s, o)
		require.Equal(t, 1, report.SpawnRefused)
		got := getJob(t, s, job.ID)
		require.Equal(t, warren.ReduceFailed, got.ReduceState)
		require.Equal(t, int64(2), got.ExpectedTasks)
		require.Contains(t, task(t, s, job.ID, warren.ReduceTaskID).Error, "a reduce task cannot spawn")
	})

	// Every spawn into one job at once gets its own range: on PostgreSQL
	// the job row's lock, on SQLite the one writer.
	t.Run("ConcurrentSpawnsIntoOneJob", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		const parents, each = 16, 3
		job := newJob(t, s, parents)
		relayAll(t, s)
		var wg sync.WaitGroup
		errs := make(chan error, parents)
		for i := int64(1); i <= parents; i++ {
			wg.Go(func() {
				_, err := s.ApplyOutcomes(t.Context(), []store.Outcome{spawning(completed(job.ID, i, `1`), fmt.Sprint(i), each)})
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		got := getJob(t, s, job.ID)
		require.Equal(t, int64(parents*(1+each)), got.ExpectedTasks)
		require.Equal(t, int64(parents*each), got.SpawnedTasks)
		tasks := allTasks(t, s, job.ID, "")
		require.Len(t, tasks, parents*(1+each))
		for i, task := range tasks {
			require.Equal(t, int64(i+1), task.TaskID, "task ids have no gap")
		}
		children := relayedPayloads(t, s, job.ID)
		require.Len(t, children, parents*each)
		seen := make(map[string]bool)
		for _, p := range children {
			require.False(t, seen[p], "child %s once", p)
			seen[p] = true
		}
	})
}
