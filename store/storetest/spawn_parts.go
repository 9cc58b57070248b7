package storetest

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// inParts cuts spawning outcome o into n spawn parts of run, its spawn
// dealt out in order, the last part with o's result and the others'
// result null.
func inParts(o store.Outcome, run string, n int) []store.Outcome {
	parts := make([]store.Outcome, n)
	per := (len(o.Spawn) + n - 1) / n
	for i := range parts {
		p := o
		p.Spawn = o.Spawn[min(i*per, len(o.Spawn)):min((i+1)*per, len(o.Spawn))]
		p.SpawnRun, p.SpawnPart, p.SpawnParts = run, i+1, n
		if i < n-1 {
			p.Result = json.RawMessage("null")
		}
		parts[i] = p
	}
	return parts
}

// childPayloads relays every pending task of job id and returns the
// offered ones' "<task id> <payload>".
func childPayloads(t *testing.T, s store.Store, id string) []string {
	t.Helper()
	var got []string
	for _, task := range relayAll(t, s) {
		if task.JobID == id {
			got = append(got, fmt.Sprintf("%d %s", task.TaskID, task.Payload))
		}
	}
	return got
}

func testSpawnParts(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("PartsInOneBatchAreOneOutcome", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 1)
		relayAll(t, s)
		report := apply(t, s, inParts(spawning(completed(job.ID, 1, `"done"`), "a", 5), "run-1", 3)...)
		require.Equal(t, store.ApplyReport{Applied: 1, Spawned: 5, SpawnedJobs: []string{job.ID}, SpawnPartsStaged: 2}, withoutEmpty(report))
		parent := task(t, s, job.ID, 1)
		require.Equal(t, warren.TaskCompleted, parent.State)
		require.JSONEq(t, `"done"`, string(parent.Result), "the last part's result")
		require.Equal(t, []string{`2 {"c":"a.1"}`, `3 {"c":"a.2"}`, `4 {"c":"a.3"}`, `5 {"c":"a.4"}`, `6 {"c":"a.5"}`}, childPayloads(t, s, job.ID))
	})

	t.Run("PartsAcrossBatchesInAnyOrder", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 2)
		relayAll(t, s)
		parts := inParts(spawning(completed(job.ID, 1, `1`), "a", 4), "run-1", 4)
		for _, i := range []int{3, 0, 2} { // the last part (the result) first
			report := apply(t, s, parts[i])
			require.Equal(t, store.ApplyReport{SpawnPartsStaged: 1}, withoutEmpty(report), "part %d", i+1)
			require.Equal(t, warren.TaskQueued, task(t, s, job.ID, 1).State, "not recorded before every part")
			require.Equal(t, int64(2), getJob(t, s, job.ID).ExpectedTasks)
		}
		report := apply(t, s, parts[0]) // a copy of a part staged before
		require.Equal(t, store.ApplyReport{Duplicates: 1}, withoutEmpty(report))
		report = apply(t, s, parts[1])
		require.Equal(t, 1, report.Applied)
		require.Equal(t, 4, report.Spawned)
		require.Equal(t, []string{`3 {"c":"a.1"}`, `4 {"c":"a.2"}`, `5 {"c":"a.3"}`, `6 {"c":"a.4"}`}, childPayloads(t, s, job.ID),
			"the children in part order, whatever order the parts came in")
		report = apply(t, s, parts...)
		require.Equal(t, store.ApplyReport{Duplicates: 4}, withoutEmpty(report), "every part again: the task is recorded")
		require.Equal(t, int64(6), getJob(t, s, job.ID).ExpectedTasks)
	})

	t.Run("PartsOfTwoRunsNeverMix", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 1)
		relayAll(t, s)
		crashed := inParts(spawning(completed(job.ID, 1, `"first"`), "first", 4), "run-1", 2)
		second := inParts(spawning(completed(job.ID, 1, `"second"`), "second", 2), "run-2", 2)
		apply(t, s, crashed[0]) // its worker died before the rest
		report := apply(t, s, second...)
		require.Equal(t, 1, report.Applied)
		require.JSONEq(t, `"second"`, string(task(t, s, job.ID, 1).Result))
		require.Equal(t, []string{`2 {"c":"second.1"}`, `3 {"c":"second.2"}`}, childPayloads(t, s, job.ID))
		report = apply(t, s, crashed[1])
		require.Equal(t, store.ApplyReport{Duplicates: 1}, withoutEmpty(report), "the first run's last part, late: the task is recorded")
		require.Equal(t, int64(3), getJob(t, s, job.ID).ExpectedTasks)
	})

	t.Run("APartOfAStaleGenerationOrAClosedJobStagesNothing", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job, closed := newJob(t, s, 1), newJob(t, s, 1)
		relayAll(t, s)
		stale := inParts(spawning(completed(job.ID, 1, `1`), "a", 2), "run-1", 2)
		for i := range stale {
			stale[i].Generation = 9
		}
		require.Equal(t, store.ApplyReport{Duplicates: 2}, withoutEmpty(apply(t, s, stale...)))
		_, err := s.CancelJob(t.Context(), closed.ID)
		require.NoError(t, err)
		require.Equal(t, store.ApplyReport{Closed: 2},
			withoutEmpty(apply(t, s, inParts(spawning(completed(closed.ID, 1, `1`), "a", 2), "run-1", 2)...)))
		// The stale parts were not staged: the current run's parts alone
		// make the outcome, with only its own tasks.
		report := apply(t, s, inParts(spawning(completed(job.ID, 1, `1`), "b", 2), "run-1", 2)...)
		require.Equal(t, 2, report.Spawned)
		require.Equal(t, []string{`2 {"c":"b.1"}`, `3 {"c":"b.2"}`}, childPayloads(t, s, job.ID))
	})

	t.Run("AnAssembledSpawnOverTheLimitFailsItsTask", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 1)
		relayAll(t, s)
		o := spawning(completed(job.ID, 1, `1`), "a", 6)
		o.MaxJobTasks = 4
		parts := inParts(o, "run-1", 3)
		slices.Reverse(parts)
		report := apply(t, s, parts...)
		require.Equal(t, 1, report.SpawnRefused)
		require.Contains(t, task(t, s, job.ID, 1).Error, "over the limit of 4 tasks per job")
		require.Equal(t, int64(1), getJob(t, s, job.ID).ExpectedTasks)
	})

	// Parts recorded at once, each in a transaction of its own: exactly
	// one of them finds every part and records the outcome, once.
	t.Run("ConcurrentPartsRecordTheOutcomeOnce", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 1)
		relayAll(t, s)
		parts := inParts(spawning(completed(job.ID, 1, `1`), "a", 8), "run-1", 8)
		reports := make(chan store.ApplyReport, 2*len(parts))
		var wg sync.WaitGroup
		for _, p := range append(slices.Clone(parts), parts...) { // and every part twice
			wg.Go(func() {
				report, err := s.ApplyOutcomes(t.Context(), []store.Outcome{p})
				if err != nil {
					t.Error(err)
				}
				reports <- report
			})
		}
		wg.Wait()
		close(reports)
		applied, spawned := 0, 0
		for r := range reports {
			applied += r.Applied
			spawned += r.Spawned
		}
		require.Equal(t, [2]int{1, 8}, [2]int{applied, spawned})
		require.Equal(t, int64(9), getJob(t, s, job.ID).ExpectedTasks)
		require.Len(t, childPayloads(t, s, job.ID), 8)
	})
}
