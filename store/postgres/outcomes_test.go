package postgres_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

func TestApplyOutcomesRecordsAndCounts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job := b.createJob(t, 3, defaultPolicy)
	b.relayAll(t)
	started := time.Date(2024, 5, 1, 10, 0, 0, 123456000, time.FixedZone("x", 3600))
	first := completed(job.ID, 2)
	first.StartedAt = &started

	report, err := b.store.ApplyOutcomes(b.ctx, []store.Outcome{first, failed(job.ID, 1)})
	require.NoError(t, err)
	require.Equal(t, store.ApplyReport{Applied: 2, AppliedFailed: 1}, report)

	got, err := b.store.GetJob(b.ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, int64(1), got.CompletedTasks)
	require.Equal(t, int64(1), got.FailedTasks)
	tasks, _, err := b.store.ListTasks(b.ctx, job.ID, store.ListTasksOpts{})
	require.NoError(t, err)
	require.Equal(t, warren.TaskFailed, tasks[0].State)
	require.Equal(t, "boom 1", tasks[0].Error)
	require.Equal(t, 4, tasks[0].Attempts)
	require.Equal(t, warren.TaskCompleted, tasks[1].State)
	require.Equal(t, started.UTC(), *tasks[1].StartedAt)
	require.Equal(t, time.UTC, tasks[1].FinishedAt.Location())

	report, err = b.store.ApplyOutcomes(b.ctx, []store.Outcome{completed(job.ID, 3), completed(job.ID, 2)})
	require.NoError(t, err)
	require.Equal(t, store.ApplyReport{Applied: 1, Duplicates: 1, ReadyToClose: []string{job.ID}}, report)

	got, err = b.store.GetJob(b.ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, int64(2), got.CompletedTasks)
	require.True(t, got.Finished())
	toClose, err := b.store.JobsToClose(b.ctx, 10)
	require.NoError(t, err)
	require.Equal(t, []string{job.ID}, toClose)
}

func TestApplyOutcomesDuplicateInOneBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job := b.createJob(t, 2, defaultPolicy)
	b.relayAll(t)

	report, err := b.store.ApplyOutcomes(b.ctx, []store.Outcome{completed(job.ID, 1), failed(job.ID, 1)})
	require.NoError(t, err)
	require.Equal(t, 1, report.Applied)
	require.Equal(t, 1, report.Duplicates)

	got, err := b.store.GetJob(b.ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, int64(1), got.CompletedTasks+got.FailedTasks)
}

func TestApplyOutcomesClosedAndUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	open := b.createJob(t, 2, defaultPolicy)
	closed := b.createJob(t, 2, defaultPolicy)
	b.relayAll(t)
	ok, err := finish(b.ctx, b.store, closed.ID, warren.JobFailed, nil, "given up")
	require.NoError(t, err)
	require.True(t, ok)

	report, err := b.store.ApplyOutcomes(b.ctx, []store.Outcome{
		completed("no-such-job", 1),
		completed(closed.ID, 1),
		completed(open.ID, 99),
		completed(open.ID, 1),
	})
	require.NoError(t, err)
	require.Equal(t, store.ApplyReport{Applied: 1, Closed: 1, Unknown: []int{0, 2}}, report)

	got, err := b.store.GetJob(b.ctx, closed.ID)
	require.NoError(t, err)
	require.Zero(t, got.CompletedTasks, "a closed job's counters do not move")
}

func TestApplyOutcomesRejectsNonTerminalState(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job := b.createJob(t, 1, defaultPolicy)

	_, err := b.store.ApplyOutcomes(b.ctx, []store.Outcome{{JobID: job.ID, TaskID: 1, State: warren.TaskQueued}})
	require.ErrorContains(t, err, "state must be completed or failed")
}

func TestApplyOutcomesFailFastReadyOverTolerance(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job := b.createJob(t, 10, warren.Policy{ToleratedFailures: 1, ToleratedFailurePercent: 10, FailFast: true})
	patient := b.createJob(t, 10, warren.Policy{ToleratedFailures: 1, ToleratedFailurePercent: 10})
	b.relayAll(t)

	report, err := b.store.ApplyOutcomes(b.ctx, []store.Outcome{failed(job.ID, 1), failed(patient.ID, 1), failed(patient.ID, 2)})
	require.NoError(t, err)
	require.Empty(t, report.ReadyToClose, "one failure in ten is tolerated")

	report, err = b.store.ApplyOutcomes(b.ctx, []store.Outcome{failed(job.ID, 2)})
	require.NoError(t, err)
	require.Equal(t, []string{job.ID}, report.ReadyToClose)

	toClose, err := b.store.JobsToClose(b.ctx, 10)
	require.NoError(t, err)
	require.Equal(t, []string{job.ID}, toClose, "only fail-fast jobs close early")

	report, err = b.store.ApplyOutcomes(b.ctx, []store.Outcome{failed(job.ID, 3)})
	require.NoError(t, err)
	require.Equal(t, 1, report.Applied)
	require.Empty(t, report.ReadyToClose, "the job was ready already")
}

func TestApplyOutcomesBeforeRelayMarksQueued(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job := b.createJob(t, 2, defaultPolicy)

	// A worker can answer before the relay commits: the outcome waits for
	// the relay's row lock, then applies to the queued task.
	done := make(chan error, 1)
	n, err := b.store.RelayBatch(b.ctx, 10, func(ctx context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		go func() {
			_, err := b.store.ApplyOutcomes(b.ctx, []store.Outcome{completed(job.ID, 1)})
			done <- err
		}()
		select {
		case err := <-done:
			done <- err
			t.Error("ApplyOutcomes did not wait for the relay's lock")
		case <-time.After(100 * time.Millisecond):
		}
		return publishAll(ctx, tasks)
	})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.NoError(t, <-done)

	got, err := b.store.GetJob(b.ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, int64(1), got.CompletedTasks)
	tasks, _, err := b.store.ListTasks(b.ctx, job.ID, store.ListTasksOpts{State: warren.TaskCompleted})
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	require.NotNil(t, tasks[0].QueuedAt)
}

func TestApplyOutcomesConcurrentAggregatorsCountExactly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const tasks = 3000
	jobs := []warren.Job{b.createJob(t, tasks, defaultPolicy), b.createJob(t, tasks, defaultPolicy)}
	b.relayAll(t)
	servers := []store.Store{b.store, open(t, b.url), open(t, b.url)}

	// Every aggregator sees every outcome (redeliveries), in its own
	// shuffled order and batches.
	var all []store.Outcome
	for _, job := range jobs {
		for id := int64(1); id <= tasks; id++ {
			if id%7 == 0 {
				all = append(all, failed(job.ID, id))
			} else {
				all = append(all, completed(job.ID, id))
			}
		}
	}
	var wg sync.WaitGroup
	reports := make([]store.ApplyReport, 6)
	for i := range reports {
		wg.Go(func() {
			mine := append([]store.Outcome(nil), all...)
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			rng.Shuffle(len(mine), func(a, c int) { mine[a], mine[c] = mine[c], mine[a] })
			for len(mine) > 0 {
				n := min(len(mine), 1+rng.IntN(400))
				r, err := servers[i%len(servers)].ApplyOutcomes(b.ctx, mine[:n])
				if err != nil {
					t.Error(err)
					return
				}
				reports[i].Applied += r.Applied
				reports[i].Duplicates += r.Duplicates
				reports[i].ReadyToClose = append(reports[i].ReadyToClose, r.ReadyToClose...)
				mine = mine[n:]
			}
		})
	}
	wg.Wait()

	applied, duplicates, ready := 0, 0, map[string]int{}
	for _, r := range reports {
		applied += r.Applied
		duplicates += r.Duplicates
		for _, id := range r.ReadyToClose {
			ready[id]++
		}
	}
	require.Equal(t, len(all), applied)
	require.Equal(t, len(all)*(len(reports)-1), duplicates)
	require.Equal(t, map[string]int{jobs[0].ID: 1, jobs[1].ID: 1}, ready, "each job is reported ready exactly once")
	for _, job := range jobs {
		got, err := b.store.GetJob(b.ctx, job.ID)
		require.NoError(t, err)
		require.Equal(t, int64(tasks-tasks/7), got.CompletedTasks)
		require.Equal(t, int64(tasks/7), got.FailedTasks)
	}
}

// Relays, aggregators and closers working on the same jobs at once must
// neither deadlock nor lose a count.
func TestRelayAggregatorAndFinishTogether(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const tasks = 500
	var jobs []warren.Job
	for range 6 {
		jobs = append(jobs, b.createJob(t, tasks, warren.Policy{ToleratedFailures: 2, ToleratedFailurePercent: 100, FailFast: true}))
	}
	servers := []store.Store{b.store, open(t, b.url)}
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()

	published := make(chan []store.TaskRef, 1024)
	var relays, aggregators sync.WaitGroup
	for i := range 3 {
		relays.Go(func() {
			for {
				n, err := servers[i%2].RelayBatch(ctx, 50, func(ctx context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
					refs, _ := publishAll(ctx, tasks)
					published <- refs // "workers" answer before the relay commits
					return refs, nil
				})
				if err != nil {
					t.Error(err)
					return
				}
				if n == 0 {
					return
				}
			}
		})
	}
	for i := range 3 {
		aggregators.Go(func() {
			s := servers[i%2]
			for refs := range published {
				var outcomes []store.Outcome
				for _, r := range refs {
					if r.TaskID%50 == 0 {
						outcomes = append(outcomes, failed(r.JobID, r.TaskID))
					} else {
						outcomes = append(outcomes, completed(r.JobID, r.TaskID))
					}
				}
				report, err := s.ApplyOutcomes(ctx, outcomes)
				if err != nil {
					t.Error(err)
					return
				}
				for _, id := range report.ReadyToClose {
					if _, err := finish(ctx, s, id, warren.JobFailed, nil, "too many failures"); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	relays.Wait()
	close(published)
	aggregators.Wait()

	for _, job := range jobs {
		got, err := b.store.GetJob(b.ctx, job.ID)
		require.NoError(t, err)
		require.Equal(t, warren.JobFailed, got.State, "fail-fast closed it at its third failure")
		require.Equal(t, got.CompletedTasks, count(t, b.url, `SELECT count(*) FROM tasks WHERE job_id = $1 AND state = 'completed'`, job.ID))
		require.Equal(t, got.FailedTasks, count(t, b.url, `SELECT count(*) FROM tasks WHERE job_id = $1 AND state = 'failed'`, job.ID))
		require.Zero(t, count(t, b.url, `SELECT count(*) FROM tasks WHERE job_id = $1 AND state IN ('pending', 'queued')`, job.ID))
	}
}

func TestJobsToCloseFindsHalfClosedJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	done := b.createJob(t, 1, defaultPolicy)
	busy := b.createJob(t, 2, defaultPolicy)
	closed := b.createJob(t, 1, defaultPolicy)
	b.relayAll(t)
	_, err := b.store.ApplyOutcomes(b.ctx, []store.Outcome{completed(done.ID, 1), completed(busy.ID, 1), completed(closed.ID, 1)})
	require.NoError(t, err)
	ok, err := finish(b.ctx, b.store, closed.ID, warren.JobCompleted, json.RawMessage(`[1]`), "")
	require.NoError(t, err)
	require.True(t, ok)

	ids, err := b.store.JobsToClose(b.ctx, 10)
	require.NoError(t, err)
	require.Equal(t, []string{done.ID}, ids)
}
