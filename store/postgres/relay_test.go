package postgres_test

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

// A round is shared between the open jobs by priority (RelayRound), each job's
// tasks in task id order, the jobs in the order the round serves them
// (the oldest first in the first round).
func TestRelayBatchSharesBetweenJobsInTaskOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.createJob(t, 3, defaultPolicy)
	second := b.createJob(t, 3, defaultPolicy)

	var offered []store.TaskRef
	n, err := b.store.RelayBatch(b.ctx, 4, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		for _, task := range tasks {
			offered = append(offered, task.Ref())
			require.Equal(t, "test", task.Type)
			require.Equal(t, warren.DefaultMaxRetries, task.MaxRetries)
			require.Equal(t, 0, task.Attempts)
		}
		return publishAll(context.Background(), tasks)
	})
	require.NoError(t, err)
	require.Equal(t, 4, n)
	require.Equal(t, []store.TaskRef{
		{JobID: first.ID, TaskID: 1}, {JobID: first.ID, TaskID: 2},
		{JobID: second.ID, TaskID: 1}, {JobID: second.ID, TaskID: 2},
	}, offered)

	n, err = b.store.RelayBatch(b.ctx, 4, publishAll)
	require.NoError(t, err)
	require.Equal(t, 2, n, "the last task of each")
	for _, id := range []string{first.ID, second.ID} {
		got, err := b.store.GetJob(b.ctx, id)
		require.NoError(t, err)
		require.Equal(t, warren.JobRunning, got.State, "every task of the job is out")
		require.NotNil(t, got.PublishedAt)
	}
}

func TestRelayBatchMarksOnlyConfirmedTasks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job := b.createJob(t, 4, defaultPolicy)

	// The broker confirms tasks 1 and 3. A ref that was not offered is
	// ignored.
	n, err := b.store.RelayBatch(b.ctx, 10, func(context.Context, []store.OutboxTask) ([]store.TaskRef, error) {
		return []store.TaskRef{{JobID: job.ID, TaskID: 3}, {JobID: job.ID, TaskID: 1}, {JobID: "other", TaskID: 1}}, nil
	})
	require.NoError(t, err)
	require.Equal(t, 2, n)

	pending, _, err := b.store.ListTasks(b.ctx, job.ID, store.ListTasksOpts{State: warren.TaskPending})
	require.NoError(t, err)
	require.Len(t, pending, 2)
	require.Equal(t, int64(2), pending[0].TaskID)
	require.Equal(t, int64(4), pending[1].TaskID)
	queued, _, err := b.store.ListTasks(b.ctx, job.ID, store.ListTasksOpts{State: warren.TaskQueued})
	require.NoError(t, err)
	require.Len(t, queued, 2)
	require.NotNil(t, queued[0].QueuedAt)

	// A failing broker marks nothing, even what it claims it confirmed.
	errBroker := errors.New("channel closed")
	n, err = b.store.RelayBatch(b.ctx, 10, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		refs, _ := publishAll(context.Background(), tasks)
		return refs, errBroker
	})
	require.ErrorIs(t, err, errBroker)
	require.Zero(t, n)

	var offered []int64
	n, err = b.store.RelayBatch(b.ctx, 10, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		for _, task := range tasks {
			offered = append(offered, task.TaskID)
		}
		return publishAll(context.Background(), tasks)
	})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, []int64{2, 4}, offered, "unconfirmed tasks are offered again")
	got, err := b.store.GetJob(b.ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, warren.JobRunning, got.State)
}

func TestRelayBatchNothingPendingDoesNotPublish(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job := b.createJob(t, 2, defaultPolicy)
	_, err := b.store.CancelJob(b.ctx, job.ID)
	require.NoError(t, err)

	n, err := b.store.RelayBatch(b.ctx, 10, func(context.Context, []store.OutboxTask) ([]store.TaskRef, error) {
		t.Error("publish called with nothing to publish")
		return nil, nil
	})
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestRelayBatchConcurrentRelaysNeverShareATask(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const jobs, tasksPerJob = 5, 2000
	for range jobs {
		b.createJob(t, tasksPerJob, defaultPolicy)
	}
	servers := []store.Store{b.store, open(t, b.url), open(t, b.url)}

	var (
		mu      sync.Mutex
		offered = make(map[store.TaskRef]int)
		wg      sync.WaitGroup
	)
	for i := range 6 {
		wg.Go(func() {
			s := servers[i%len(servers)]
			for {
				n, err := s.RelayBatch(b.ctx, 97, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
					mu.Lock()
					for _, task := range tasks {
						offered[task.Ref()]++
					}
					mu.Unlock()
					return publishAll(context.Background(), tasks)
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
	wg.Wait()

	require.Len(t, offered, jobs*tasksPerJob)
	for ref, times := range offered {
		require.Equal(t, 1, times, "task %v offered %d times", ref, times)
	}
	require.Equal(t, int64(jobs), count(t, b.url, `SELECT count(*) FROM jobs WHERE state = 'running'`))
}

// Two relays publish the last tasks of one job at the same moment: each
// sees the other's tasks still pending when it marks its own, yet the job
// must end up running.
func TestRelayBatchConcurrentLastTasksStartTheJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job := b.createJob(t, 10, defaultPolicy)
	other := open(t, b.url)

	bothPublishing := make(chan struct{})
	var arrived sync.WaitGroup
	arrived.Add(2)
	go func() { arrived.Wait(); close(bothPublishing) }()
	publish := func(ctx context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		arrived.Done()
		select {
		case <-bothPublishing:
		case <-time.After(10 * time.Second):
			return nil, errors.New("the other relay never published")
		}
		return publishAll(ctx, tasks)
	}

	var wg sync.WaitGroup
	counts := make([]int, 2)
	errs := make([]error, 2)
	for i, s := range []store.Store{b.store, other} {
		wg.Go(func() { counts[i], errs[i] = s.RelayBatch(b.ctx, 5, publish) })
	}
	wg.Wait()

	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.Equal(t, []int{5, 5}, counts)
	got, err := b.store.GetJob(b.ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, warren.JobRunning, got.State)
}
