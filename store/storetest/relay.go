package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

func testRelayBatch(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("OldestJobFirstInTaskOrder", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		a := createJob(t, s, store.NewJob{Type: "resize", Policy: warren.Policy{MaxRetries: 2, BatchSize: 16}}, 3)
		b := createJob(t, s, store.NewJob{Type: "crop", Policy: warren.Policy{MaxRetries: 7}}, 2)

		offered := relay(t, s, 4)
		require.Equal(t, append(refs(a.ID, 1, 2, 3), refs(b.ID, 1)...), offeredRefs(offered))
		for _, task := range offered[:3] {
			require.Equal(t, "resize", task.Type)
			require.Equal(t, 2, task.MaxRetries)
			require.Equal(t, 16, task.BatchSize, "the relay packs the job's tasks by its batch size")
			require.Zero(t, task.Attempts)
			require.JSONEq(t, string(payload(task.TaskID)), string(task.Payload))
		}
		require.Equal(t, "crop", offered[3].Type)
		require.Equal(t, 7, offered[3].MaxRetries)
		require.Equal(t, 1, offered[3].BatchSize, "a job without a batch size sends one message per task")
		require.JSONEq(t, string(payload(1)), string(offered[3].Payload))

		for _, task := range allTasks(t, s, a.ID, "") {
			require.Equal(t, warren.TaskQueued, task.State)
			requireRecent(t, task.QueuedAt, "QueuedAt")
		}
		running := getJob(t, s, a.ID)
		require.Equal(t, warren.JobRunning, running.State, "every task of a is out")
		requireRecent(t, running.PublishedAt, "PublishedAt")
		require.Nil(t, running.StartedAt, "no task reported a start yet")

		pending := getJob(t, s, b.ID)
		require.Equal(t, warren.JobPending, pending.State, "b still has a pending task")
		require.Nil(t, pending.PublishedAt)
		require.Equal(t, []warren.TaskState{warren.TaskQueued, warren.TaskPending}, taskStates(t, s, b.ID))
		require.Nil(t, allTasks(t, s, b.ID, warren.TaskPending)[0].QueuedAt)

		require.Equal(t, refs(b.ID, 2), offeredRefs(relay(t, s, 10)))
		require.Equal(t, warren.JobRunning, getJob(t, s, b.ID).State)
		requireSameJob(t, running, getJob(t, s, a.ID))
		require.Empty(t, relay(t, s, 10), "nothing is left to publish")
	})

	t.Run("CarriesTheJobsTraceContext", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		const (
			parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
			state  = "congo=t61rcWkgMzE"
		)
		traced := createJob(t, s, store.NewJob{TraceParent: parent, TraceState: state}, 2)
		untraced := newJob(t, s, 1)

		offered := relay(t, s, 10)
		require.Equal(t, append(refs(traced.ID, 1, 2), refs(untraced.ID, 1)...), offeredRefs(offered))
		for _, task := range offered[:2] {
			require.Equal(t, parent, task.TraceParent, "every task of the job carries the trace context it was submitted in")
			require.Equal(t, state, task.TraceState)
		}
		require.Empty(t, offered[2].TraceParent, "a job submitted outside any trace has none")
		require.Empty(t, offered[2].TraceState)
		got, err := s.GetJob(t.Context(), traced.ID)
		require.NoError(t, err)
		require.Equal(t, [2]string{parent, state}, [2]string{got.TraceParent, got.TraceState}, "the job keeps it, for its close")
		got, err = s.GetJob(t.Context(), untraced.ID)
		require.NoError(t, err)
		require.Equal(t, [2]string{}, [2]string{got.TraceParent, got.TraceState})
	})

	t.Run("SharesARoundByPriority", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		a := newJob(t, s, 10)
		b := createJob(t, s, store.NewJob{Policy: warren.Policy{Priority: 30}}, 10)
		c := createJob(t, s, store.NewJob{Policy: warren.Policy{BatchSize: 4}}, 10)
		require.Equal(t, 30, getJob(t, s, b.ID).Policy.Priority)
		require.Zero(t, getJob(t, s, a.ID).Policy.Priority, "0 is the default priority")

		var offered []store.OutboxTask
		n, err := s.RelayRound(t.Context(), store.Round{Messages: 10, Tasks: 100}, func(ctx context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
			offered = tasks
			return publishAll(ctx, tasks)
		})
		require.NoError(t, err)
		// Weights 10, 30 and 10 of 10 messages: 2, 6 and 2 messages, of one
		// task for a and b, of 4 tasks for c.
		want := append(append(refs(a.ID, 1, 2), refs(b.ID, 1, 2, 3, 4, 5, 6)...), refs(c.ID, 1, 2, 3, 4, 5, 6, 7, 8)...)
		require.Equal(t, want, offeredRefs(offered))
		require.Equal(t, len(want), n)
	})

	t.Run("AsksTheRoundForAutomaticBatchSizes", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		auto := newJob(t, s, 12)
		fixed := createJob(t, s, store.NewJob{Policy: warren.Policy{BatchSize: 3}}, 6)
		held := newJob(t, s, 4)
		require.Zero(t, getJob(t, s, auto.ID).Policy.BatchSize, "a job without batch_size leaves it to warren")

		var asked []store.PendingJob
		var offered []store.OutboxTask
		round := store.Round{Messages: 100, Tasks: 10, Batch: func(j store.PendingJob) (int, int) {
			asked = append(asked, j)
			if j.ID == held.ID {
				return 1, 0 // held back this round
			}
			return 5, j.Pending
		}}
		_, err := s.RelayRound(t.Context(), round, func(ctx context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
			offered = tasks
			return publishAll(ctx, tasks)
		})
		require.NoError(t, err)
		require.Len(t, asked, 2, "only the jobs without a batch size are asked about")
		require.Equal(t, auto.ID, asked[0].ID)
		require.Equal(t, held.ID, asked[1].ID)
		require.Zero(t, asked[0].BatchSize)
		require.Equal(t, 10, asked[0].Pending, "pending counted up to the round's tasks")
		require.True(t, asked[0].More, "12 tasks: more than counted")
		require.Equal(t, 4, asked[1].Pending)
		require.False(t, asked[1].More, "4 tasks: all counted")
		require.NotEmpty(t, offered)
		for _, task := range offered {
			want := map[string]int{auto.ID: 5, fixed.ID: 3}[task.JobID]
			require.Equal(t, want, task.BatchSize, "task %s:%d", task.JobID, task.TaskID)
		}
		require.Len(t, allTasks(t, s, held.ID, warren.TaskPending), 4, "the job held back keeps its tasks")
	})

	t.Run("ClaimsWhileThePayloadsAreUnderTheRoundsBytes", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		a := newJob(t, s, 5) // payloads {"i":N}: 7 bytes each
		b := newJob(t, s, 5)
		var offered []store.OutboxTask
		_, err := s.RelayRound(t.Context(), store.Round{Messages: 100, Tasks: 100, Bytes: 3*7 + 1},
			func(ctx context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
				offered = tasks
				return publishAll(ctx, tasks)
			})
		require.NoError(t, err)
		require.Equal(t, refs(a.ID, 1, 2, 3, 4), offeredRefs(offered), "21 bytes claimed are under 22: one more, then the budget is spent")
		require.Len(t, allTasks(t, s, b.ID, warren.TaskPending), 5, "the rest stays pending")

		_, err = s.RelayRound(t.Context(), store.Round{Messages: 1, Tasks: 1, Bytes: 1},
			func(ctx context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
				offered = tasks
				return publishAll(ctx, tasks)
			})
		require.NoError(t, err)
		require.Len(t, offered, 1, "a round takes at least one task, however large")
	})

	t.Run("SpendsTheRoundsBytesInServingOrder", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		old := newJob(t, s, 20) // payloads {"i":N}: 7 or 8 bytes each
		young := newJob(t, s, 2)
		round := store.Round{Messages: 100, Tasks: 100, Bytes: 3*7 + 1}
		served := map[string]int{}
		for range 2 {
			_, err := s.RelayRound(t.Context(), round, func(ctx context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
				for _, task := range tasks {
					served[task.JobID]++
				}
				return publishAll(ctx, tasks)
			})
			require.NoError(t, err)
		}
		require.Positive(t, served[young.ID], "the old job's share alone is over the budget: the young job is served first in the next round")
		require.Positive(t, served[old.ID])
	})

	t.Run("ClaimsTheJobsInServingOrder", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		a := newJob(t, s, 4)
		b := newJob(t, s, 4)
		require.Equal(t, append(refs(a.ID, 1), refs(b.ID, 1)...), offeredRefs(relay(t, s, 2)), "the first round serves from the oldest job")
		require.Equal(t, append(refs(b.ID, 2), refs(a.ID, 2)...), offeredRefs(relay(t, s, 2)), "the next one from the next job")
		require.Equal(t, append(refs(a.ID, 3), refs(b.ID, 3)...), offeredRefs(relay(t, s, 2)))
	})

	t.Run("TellsWhichJobsTheRoundCut", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		big := createJob(t, s, store.NewJob{Policy: warren.Policy{BatchSize: 10}}, 30)
		small := createJob(t, s, store.NewJob{Policy: warren.Policy{BatchSize: 16}}, 5)
		var offered []store.OutboxTask
		_, err := s.RelayRound(t.Context(), store.Round{Messages: 100, Tasks: 25},
			func(ctx context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
				offered = tasks
				return publishAll(ctx, tasks)
			})
		require.NoError(t, err)
		// 25 tasks: 2 batches of the big job, the small job's 5.
		require.Equal(t, append(refs(big.ID, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20),
			refs(small.ID, 1, 2, 3, 4, 5)...), offeredRefs(offered))
		for _, task := range offered {
			require.Equal(t, task.JobID == big.ID, task.More, "task %s:%d: only the big job has more than the round gave it", task.JobID, task.TaskID)
		}

		// The round's bytes cut the last 5 tasks of the big job to 3.
		_, err = s.RelayRound(t.Context(), store.Round{Messages: 100, Tasks: 100, Bytes: 2*8 + 1},
			func(ctx context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
				offered = tasks
				return publishAll(ctx, tasks)
			})
		require.NoError(t, err)
		require.Equal(t, refs(big.ID, 21, 22, 23), offeredRefs(offered))
		for _, task := range offered {
			require.True(t, task.More, "task %d: the budget cut the job's share", task.TaskID)
		}
		offered = relayAll(t, s)
		require.Equal(t, refs(big.ID, 24, 25, 26, 27, 28, 29, 30), offeredRefs(offered))
		for _, task := range offered {
			require.False(t, task.More, "task %d: the job's last tasks", task.TaskID)
		}
	})

	t.Run("IgnoresConfirmsOfTasksItDidNotOffer", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 3)
		other := newJob(t, s, 1)
		n, err := s.RelayRound(t.Context(), store.Round{Messages: 2, Tasks: 2, Room: func(q string) int { return 2 }},
			func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
				require.Equal(t, append(refs(job.ID, 1), refs(other.ID, 1)...), offeredRefs(tasks))
				return []store.TaskRef{{JobID: job.ID, TaskID: 1}, {JobID: job.ID, TaskID: 3}, {JobID: job.ID, TaskID: 1}, {JobID: "unknown", TaskID: 1}}, nil
			})
		require.NoError(t, err)
		require.Equal(t, 1, n, "task 1, once; task 3 was not offered")
		require.Equal(t, []warren.TaskState{warren.TaskQueued, warren.TaskPending, warren.TaskPending}, taskStates(t, s, job.ID))
		require.Equal(t, []warren.TaskState{warren.TaskPending}, taskStates(t, s, other.ID), "offered, not confirmed")
	})

	t.Run("CarriesTheJobsQueue", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		gpu := createJob(t, s, store.NewJob{Policy: warren.Policy{Queue: "gpu"}}, 2)
		plain := newJob(t, s, 1)
		require.Equal(t, "gpu", getJob(t, s, gpu.ID).Policy.Queue)
		require.Empty(t, getJob(t, s, plain.ID).Policy.Queue, `"" is the default queue`)

		room := map[string]int{"gpu": 1, "default": 5}
		var offered []store.OutboxTask
		_, err := s.RelayRound(t.Context(), store.Round{Tasks: 100, Room: func(q string) int { return room[q] }},
			func(ctx context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
				offered = tasks
				return publishAll(ctx, tasks)
			})
		require.NoError(t, err)
		require.Equal(t, append(refs(gpu.ID, 1), refs(plain.ID, 1)...), offeredRefs(offered), "one message of room in gpu")
		require.Equal(t, "gpu", offered[0].Queue)
		require.Equal(t, "default", offered[1].Queue)
	})

	t.Run("ServesJobsInTurn", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		jobs := []warren.Job{newJob(t, s, 3), newJob(t, s, 3), newJob(t, s, 3)}
		served := map[string]int{}
		for range 6 {
			offered := relay(t, s, 1)
			require.Len(t, offered, 1, "one message per round")
			served[offered[0].JobID]++
		}
		for _, j := range jobs {
			require.Equal(t, 2, served[j.ID], "rounds of one message serve the jobs in turn")
		}
	})

	t.Run("CarriesTheJobsTaskTimeout", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		given := createJob(t, s, store.NewJob{Policy: warren.Policy{TaskTimeout: 90*time.Second + 250*time.Millisecond}}, 2)
		unset := createJob(t, s, store.NewJob{}, 1)

		offered := relayAll(t, s)
		require.Len(t, offered, 3)
		for _, task := range offered {
			if task.JobID == given.ID {
				require.Equal(t, 90*time.Second+250*time.Millisecond, task.TaskTimeout, "the job's task_timeout, to the millisecond")
			} else {
				require.Equal(t, unset.ID, task.JobID)
				require.Equal(t, warren.DefaultTaskTimeout, task.TaskTimeout, "a job without task_timeout has the default")
			}
		}
	})

	t.Run("MarksOnlyConfirmed", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 5)

		n, err := s.RelayBatch(t.Context(), 10, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
			require.Len(t, tasks, 5)
			return []store.TaskRef{tasks[1].Ref(), tasks[3].Ref()}, nil
		})
		require.NoError(t, err)
		require.Equal(t, 2, n)
		require.Equal(t, []warren.TaskState{warren.TaskPending, warren.TaskQueued, warren.TaskPending, warren.TaskQueued, warren.TaskPending},
			taskStates(t, s, job.ID))
		require.Equal(t, warren.JobPending, getJob(t, s, job.ID).State)
		require.Nil(t, getJob(t, s, job.ID).PublishedAt)

		require.Equal(t, refs(job.ID, 1, 3, 5), offeredRefs(relay(t, s, 10)),
			"unconfirmed tasks are offered again")
		require.Equal(t, repeat(warren.TaskQueued, 5), taskStates(t, s, job.ID))
		require.Equal(t, warren.JobRunning, getJob(t, s, job.ID).State)
	})

	t.Run("PublishErrorMarksNothing", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 3)
		errBroker := errors.New("broker unreachable")

		n, err := s.RelayBatch(t.Context(), 10, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
			return offeredRefs(tasks), errBroker
		})
		require.ErrorIs(t, err, errBroker)
		require.Zero(t, n)
		require.Equal(t, repeat(warren.TaskPending, 3), taskStates(t, s, job.ID))
		require.Equal(t, warren.JobPending, getJob(t, s, job.ID).State)

		require.Len(t, relay(t, s, 10), 3, "the tasks are offered again")
	})

	t.Run("NoLimitMeansDefaultPageSize", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		const tasks = store.DefaultPageSize + 1
		job := newJob(t, s, tasks)

		first := relay(t, s, 0)
		require.Len(t, first, store.DefaultPageSize, "limit 0 means store.DefaultPageSize")
		require.Equal(t, int64(1), first[0].TaskID)
		require.Equal(t, refs(job.ID, tasks), offeredRefs(relay(t, s, -1)), "limit -1 means store.DefaultPageSize")
		require.Equal(t, repeat(warren.TaskQueued, tasks), taskStates(t, s, job.ID))
	})

	t.Run("NothingToPublish", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		require.Empty(t, relay(t, s, 10))
		job := newJob(t, s, 1)
		relayAll(t, s)
		require.Empty(t, relay(t, s, 10))
		require.Equal(t, warren.JobRunning, getJob(t, s, job.ID).State)
	})

	t.Run("SkipsClosedJobs", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		cancelled := newJob(t, s, 2)
		finished := newJob(t, s, 2)
		open := newJob(t, s, 2)
		_, err := s.CancelJob(t.Context(), cancelled.ID)
		require.NoError(t, err)
		ok, err := s.FinishJob(t.Context(), finished.ID, getJob(t, s, finished.ID).Version, warren.JobFailed, nil, "given up")
		require.NoError(t, err)
		require.True(t, ok)

		require.Equal(t, refs(open.ID, 1, 2), offeredRefs(relayAll(t, s)))
	})

	t.Run("SkipsFinishedTasks", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 3)
		apply(t, s, completed(job.ID, 2, `2`))

		require.Equal(t, refs(job.ID, 1, 3), offeredRefs(relayAll(t, s)))
		require.Equal(t, warren.JobRunning, getJob(t, s, job.ID).State)
	})

	t.Run("ConcurrentRelaysShareTheOutbox", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		const jobs, tasksPerJob, relays = 5, 200, 4
		var ids []string
		for range jobs {
			ids = append(ids, newJob(t, s, tasksPerJob).ID)
		}

		var (
			mu        sync.Mutex
			published = make(map[store.TaskRef]int)
			marked    int
			wg        sync.WaitGroup
			start     = make(chan struct{})
			errs      = make([]error, relays)
		)
		publish := func(ctx context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
			mu.Lock()
			defer mu.Unlock()
			for _, task := range tasks {
				published[task.Ref()]++
			}
			return publishAll(ctx, tasks)
		}
		for i := range relays {
			wg.Go(func() {
				<-start
				for {
					n, err := s.RelayBatch(t.Context(), 37, publish)
					if err != nil {
						errs[i] = err
						return
					}
					if n == 0 {
						return
					}
					mu.Lock()
					marked += n
					mu.Unlock()
				}
			})
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}

		require.Len(t, published, jobs*tasksPerJob, "every task was published")
		for ref, n := range published {
			require.Equal(t, 1, n, "task %v offered %d times", ref, n)
		}
		require.Equal(t, jobs*tasksPerJob, marked)
		require.Empty(t, relay(t, s, 10))
		for _, id := range ids {
			require.Equal(t, repeat(warren.TaskQueued, tasksPerJob), taskStates(t, s, id))
			require.Equal(t, warren.JobRunning, getJob(t, s, id).State)
		}
	})

	testRelayCap(t, newStore)
}
