package storetest

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// testRelayCap holds the relay to a job's concurrency cap
// (warren.Policy.MaxConcurrency): at no moment more of its tasks queued
// than the cap, and what the job cannot use goes to the other jobs.
func testRelayCap(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("CapHoldsAcrossRounds", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxConcurrency: 3}}, 10)
		require.Equal(t, 3, getJob(t, s, job.ID).Policy.MaxConcurrency, "the cap is stored with the job")

		require.Equal(t, refs(job.ID, 1, 2, 3), offeredRefs(relay(t, s, 100)))
		require.Empty(t, relay(t, s, 100), "three tasks are in flight: the cap is reached")
		require.Len(t, allTasks(t, s, job.ID, warren.TaskQueued), 3)
		require.Equal(t, warren.JobPending, getJob(t, s, job.ID).State, "the job still has pending tasks")
	})

	t.Run("RecordedOutcomesFreeRoom", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxConcurrency: 3}}, 6)
		relay(t, s, 100)
		apply(t, s, completed(job.ID, 1, `1`), failed(job.ID, 3, "boom"))

		require.Equal(t, refs(job.ID, 4, 5), offeredRefs(relay(t, s, 100)), "two outcomes free two slots")
		require.Empty(t, relay(t, s, 100))
		apply(t, s, completed(job.ID, 2, `2`))
		require.Equal(t, refs(job.ID, 6), offeredRefs(relay(t, s, 100)))
		require.Equal(t, warren.JobRunning, getJob(t, s, job.ID).State, "every task is out")
	})

	t.Run("BatchesCountTheirTasks", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxConcurrency: 5, BatchSize: 4}}, 20)

		offered := relay(t, s, 100)
		require.Equal(t, refs(job.ID, 1, 2, 3, 4, 5), offeredRefs(offered), "a batch of 4 and one of the room left, 1")
		for _, task := range offered {
			require.Equal(t, 4, task.BatchSize, "the job's batch size is kept; the share is cut")
		}
		apply(t, s, completed(job.ID, 2, `2`))
		require.Equal(t, refs(job.ID, 6), offeredRefs(relay(t, s, 100)), "one slot: one task, however large the batch size")
	})

	t.Run("UncappedNeighbourGetsTheRest", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		capped := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxConcurrency: 2}}, 10)
		other := newJob(t, s, 10)

		var offered []store.OutboxTask
		_, err := s.RelayRound(t.Context(), store.Round{Messages: 10, Tasks: 10}, func(ctx context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
			offered = tasks
			return publishAll(ctx, tasks)
		})
		require.NoError(t, err)
		require.Equal(t, append(refs(capped.ID, 1, 2), refs(other.ID, 1, 2, 3, 4, 5, 6, 7, 8)...), offeredRefs(offered),
			"the capped job's cut share of the round goes to the other job")
		require.True(t, offered[0].More, "the cap cut the capped job's share")
	})

	t.Run("TellsWhichJobsTheCapHeld", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		capped := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxConcurrency: 2}}, 3)
		roomy := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxConcurrency: 5}}, 3)
		newJob(t, s, 3)

		round := func() []string {
			var held []string
			_, err := s.RelayRound(t.Context(), store.Round{Messages: 100, Tasks: 100, Held: func(id string) { held = append(held, id) }}, publishAll)
			require.NoError(t, err)
			return held
		}
		require.Equal(t, []string{capped.ID}, round(), "only the job with more pending tasks than room")
		require.Equal(t, []string{capped.ID}, round(), "still held: nothing of it was recorded")
		apply(t, s, completed(capped.ID, 1, `1`))
		require.Empty(t, round(), "its last task went out")
		require.Equal(t, 3, len(allTasks(t, s, roomy.ID, warren.TaskQueued)))
	})

	t.Run("ReconcilerRequeueStaysWithinTheCap", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxConcurrency: 2, MaxRetries: 5, TaskTimeout: time.Second}}, 5)
		relay(t, s, 100)
		queuedAt := *task(t, s, job.ID, 2).QueuedAt

		requireReconciled(t, reconcile(t, s, queuedAt.Add(time.Hour), 1), 1, 0, nil)
		require.Equal(t, refs(job.ID, 1), offeredRefs(relay(t, s, 100)), "the requeued task takes its own slot back, no more")
		require.Empty(t, relay(t, s, 100))
		require.Len(t, allTasks(t, s, job.ID, warren.TaskQueued), 2)

		requireReconciled(t, reconcile(t, s, queuedAt.Add(2*time.Hour), 10), 2, 0, nil)
		require.Equal(t, refs(job.ID, 1, 2), offeredRefs(relay(t, s, 100)))
		require.Len(t, allTasks(t, s, job.ID, warren.TaskQueued), 2)
	})

	// Rounds side by side (PostgreSQL's relays, several loops or
	// servers) never together take a capped job past its cap. A round's
	// tasks count as in flight from its publish until their outcomes are
	// recorded, which is when the store may let others out.
	t.Run("ConcurrentRoundsKeepTheCap", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		const tasks, limit, relays = 60, 3, 4
		job := createJob(t, s, store.NewJob{Policy: warren.Policy{MaxConcurrency: limit}}, tasks)
		other := newJob(t, s, tasks)

		var (
			mu               sync.Mutex
			inFlight, most   int
			done, otherTasks int
			wg               sync.WaitGroup
			errs             = make([]error, relays)
		)
		for i := range relays {
			wg.Go(func() {
				for {
					var mine []store.Outcome
					_, err := s.RelayBatch(t.Context(), 5, func(ctx context.Context, offered []store.OutboxTask) ([]store.TaskRef, error) {
						mu.Lock()
						defer mu.Unlock()
						for _, task := range offered {
							if task.JobID == job.ID {
								inFlight++
								mine = append(mine, completed(job.ID, task.TaskID, `1`))
							} else {
								otherTasks++
							}
						}
						most = max(most, inFlight)
						return publishAll(ctx, offered)
					})
					if err == nil && len(mine) > 0 {
						// The count drops only once the outcomes are
						// recorded, under the lock a publish takes: a
						// round that read the store after the record
						// publishes after the drop.
						mu.Lock()
						_, err = s.ApplyOutcomes(t.Context(), mine)
						inFlight -= len(mine)
						done += len(mine)
						mu.Unlock()
					}
					if err != nil {
						errs[i] = err
						return
					}
					mu.Lock()
					finished := done == tasks
					mu.Unlock()
					if finished {
						return
					}
					runtime.Gosched()
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		require.LessOrEqual(t, most, limit, "at most %d tasks of the capped job in flight at once", limit)
		require.Equal(t, limit, most, "the rounds used the whole cap")
		require.Equal(t, tasks, otherTasks, "the uncapped job went out beside it")
		require.Empty(t, allTasks(t, s, job.ID, warren.TaskPending))
		require.Len(t, allTasks(t, s, other.ID, warren.TaskQueued), tasks)
	})
}
