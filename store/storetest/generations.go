package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// at returns o as an outcome of generation g.
func at(g int, o store.Outcome) store.Outcome {
	o.Generation = g
	return o
}

// offeredGenerations lists the generations of tasks.
func offeredGenerations(tasks []store.OutboxTask) []int {
	gs := make([]int, len(tasks))
	for i, task := range tasks {
		gs[i] = task.Generation
	}
	return gs
}

func testGenerations(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("NewTasksAreGenerationOne", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 3)
		require.Equal(t, []int{1, 1, 1}, offeredGenerations(relayAll(t, s)))
		report := apply(t, s, at(1, completed(job.ID, 1, `1`)), at(0, completed(job.ID, 2, `2`)))
		require.Equal(t, 2, report.Applied, "the current generation and an unknown one (0) are applied")
		report = apply(t, s, at(2, completed(job.ID, 3, `3`)))
		require.Equal(t, store.ApplyReport{Duplicates: 1}, withoutEmpty(report), "a generation the task never had changes nothing")
		require.Equal(t, warren.TaskQueued, task(t, s, job.ID, 3).State)
	})

	// The reconciler's requeue bumps the generation: the lost copy's
	// outcome, should it come after all, no longer counts.
	t.Run("ReconcilerRequeueBumps", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxRetries: 1}}, 1)
		relayAll(t, s)
		requireReconciled(t, reconcile(t, s, time.Now().Add(2*time.Hour), 100), 1, 0, nil)
		require.Equal(t, []int{2}, offeredGenerations(relayAll(t, s)))

		report := apply(t, s, at(1, failed(job.ID, 1, "the lost copy failed")))
		require.Equal(t, store.ApplyReport{Duplicates: 1}, withoutEmpty(report))
		require.Equal(t, warren.TaskQueued, task(t, s, job.ID, 1).State)
		require.Zero(t, getJob(t, s, job.ID).FailedTasks)

		report = apply(t, s, at(2, completed(job.ID, 1, `1`)))
		require.Equal(t, store.ApplyReport{Applied: 1, ReadyToClose: []string{job.ID}}, withoutEmpty(report))
	})

	// Issue 11: the reconciler fails a task as lost while its message is
	// still queued, the job is redriven, and the old copy's dead letter
	// then arrives. It must not fail the new run.
	t.Run("RedriveBumps", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxRetries: 0}}, 2)
		relayAll(t, s)
		apply(t, s, at(1, completed(job.ID, 1, `1`)))
		requireReconciled(t, reconcile(t, s, time.Now().Add(2*time.Hour), 100), 0, 1, []string{job.ID})
		finish(t, s, job.ID, warren.JobFailed, nil, "1 of 2 tasks failed")
		_, n, err := s.RedriveJob(t.Context(), job.ID)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		offered := relayAll(t, s)
		require.Equal(t, refs(job.ID, 2), offeredRefs(offered))
		require.Equal(t, []int{2}, offeredGenerations(offered))

		report := apply(t, s, at(1, failed(job.ID, 2, "permanent: the old copy")))
		require.Equal(t, store.ApplyReport{Duplicates: 1}, withoutEmpty(report), "the old copy's dead letter")
		got := getJob(t, s, job.ID)
		require.Equal(t, warren.JobRunning, got.State)
		require.Zero(t, got.FailedTasks)
		require.Equal(t, warren.TaskQueued, task(t, s, job.ID, 2).State)

		report = apply(t, s, at(2, completed(job.ID, 2, `2`)))
		require.Equal(t, store.ApplyReport{Applied: 1, ReadyToClose: []string{job.ID}}, withoutEmpty(report))
	})

	// A redrive of a fail-fast job also requeues the tasks its close
	// cancelled, some of which had messages out: those are bumped too.
	t.Run("RedriveBumpsCancelledTasks", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{FailFast: true}}, 3)
		relay(t, s, 2)
		apply(t, s, failed(job.ID, 1, "boom"))
		finish(t, s, job.ID, warren.JobFailed, nil, "failed fast")
		_, n, err := s.RedriveJob(t.Context(), job.ID)
		require.NoError(t, err)
		require.Equal(t, 3, n)
		require.Equal(t, []int{2, 2, 2}, offeredGenerations(relayAll(t, s)))

		report := apply(t, s, at(1, completed(job.ID, 2, `"ran before the close"`)))
		require.Equal(t, store.ApplyReport{Duplicates: 1}, withoutEmpty(report))
	})

	t.Run("ReopenBumps", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{FailFast: true}}, 3)
		relay(t, s, 2)
		apply(t, s, at(1, failed(job.ID, 1, "boom")))
		finish(t, s, job.ID, warren.JobFailed, nil, "failed fast")

		g, ok, err := s.ReopenTask(t.Context(), job.ID, 1)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, 2, g, "the replay publishes the task at its new generation")
		offered := relayAll(t, s)
		require.Equal(t, refs(job.ID, 2, 3), offeredRefs(offered), "the tasks the close cancelled")
		require.Equal(t, []int{2, 2}, offeredGenerations(offered))

		report := apply(t, s, at(1, failed(job.ID, 1, "the dead letter again")), at(1, completed(job.ID, 2, `2`)))
		require.Equal(t, store.ApplyReport{Duplicates: 2}, withoutEmpty(report))
		report = apply(t, s, at(2, completed(job.ID, 1, `1`)), at(2, completed(job.ID, 2, `2`)), at(0, completed(job.ID, 3, `3`)))
		require.Equal(t, store.ApplyReport{Applied: 3, ReadyToClose: []string{job.ID}}, withoutEmpty(report))

		g, ok, err = s.ReopenTask(t.Context(), job.ID, 1)
		require.NoError(t, err)
		require.False(t, ok)
		require.Zero(t, g, "nothing was reopened")
	})

	// Of several outcomes of one task in a batch, the first of the
	// task's generation counts, wherever an older one stands.
	t.Run("FirstCurrentOutcomeOfABatchCounts", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxRetries: 1}}, 2)
		relayAll(t, s)
		requireReconciled(t, reconcile(t, s, time.Now().Add(2*time.Hour), 100), 2, 0, nil)
		relayAll(t, s)

		report := apply(t, s,
			at(1, failed(job.ID, 1, "old copy")), at(2, completed(job.ID, 1, `"new"`)), at(2, failed(job.ID, 1, "later")),
			at(2, completed(job.ID, 2, `"new"`)), at(1, failed(job.ID, 2, "old copy")))
		require.Equal(t, store.ApplyReport{Applied: 2, Duplicates: 3, ReadyToClose: []string{job.ID}}, withoutEmpty(report))
		for _, id := range []int64{1, 2} {
			tk := task(t, s, job.ID, id)
			require.Equal(t, warren.TaskCompleted, tk.State, "task %d", id)
			require.JSONEq(t, `"new"`, string(tk.Result), "task %d", id)
		}
	})
}
