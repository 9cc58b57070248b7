package reconciler_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/reconciler"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/sqlite"
)

func publishAll(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
	refs := make([]store.TaskRef, len(tasks))
	for i, t := range tasks {
		refs[i] = t.Ref()
	}
	return refs, nil
}

// Tasks whose messages are lost come back to the outbox up to max_retries
// times, then fail as lost, and the job becomes ready to close.
func TestLostTasksAreRequeuedThenFailed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	s, err := sqlite.OpenWith(ctx, filepath.Join(t.TempDir(), "w.db"),
		sqlite.Options{Clock: func() time.Time { return time.Unix(0, clock.Load()) }})
	require.NoError(t, err)
	defer s.Close()
	tasks := func(yield func(json.RawMessage, error) bool) {
		for range 3 {
			if !yield(json.RawMessage(`{}`), nil) {
				return
			}
		}
	}
	job, _, err := s.CreateJob(ctx, store.NewJob{Type: "t", Policy: warren.Policy{Reduce: "collect", MaxRetries: 2, TaskTimeout: time.Second}}, tasks)
	require.NoError(t, err)

	var requeued atomic.Int64
	var ready []string
	r, err := reconciler.New(reconciler.Config{
		Store: s, BatchSize: 2,
		OnRequeued:     func(n int) { requeued.Add(int64(n)) },
		OnReadyToClose: func(id string) { ready = append(ready, id) },
	})
	require.NoError(t, err)

	for round := 1; round <= 2; round++ {
		n, err := s.RelayBatch(ctx, 10, publishAll) // published, then lost
		require.NoError(t, err)
		require.Equal(t, 3, n)
		rep, err := r.RunOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, rep.Requeued+rep.Failed, "round %d: nothing is stale before the timeout", round)

		clock.Add(int64(time.Hour))
		rep, err = r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 3, rep.Requeued, "round %d", round)
		require.Zero(t, rep.Failed)
		offered := 0
		_, err = s.RelayBatch(ctx, 10, func(ctx context.Context, ts []store.OutboxTask) ([]store.TaskRef, error) {
			for _, tk := range ts {
				require.Equal(t, round, tk.Attempts, "the lost run counts")
			}
			offered = len(ts)
			return nil, nil // not published this time: stays pending
		})
		require.NoError(t, err)
		require.Equal(t, 3, offered)
		clock.Store(time.Now().UnixNano())
	}
	require.Equal(t, int64(6), requeued.Load())

	// Third loss: no retries left.
	_, err = s.RelayBatch(ctx, 10, publishAll)
	require.NoError(t, err)
	clock.Add(int64(time.Hour))
	rep, err := r.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, rep.Failed)
	require.Equal(t, []string{job.ID}, ready)
	failed, _, err := s.ListTasks(ctx, job.ID, store.ListTasksOpts{State: warren.TaskFailed})
	require.NoError(t, err)
	require.Len(t, failed, 3)
	require.Contains(t, failed[0].Error, "lost")
	require.Equal(t, 3, failed[0].Attempts)
}

func TestConfigNeedsAStore(t *testing.T) {
	t.Parallel()
	_, err := reconciler.New(reconciler.Config{})
	require.ErrorContains(t, err, "Config.Store")
}

// queues is a fake broker for Config.Busy: whether a message waits, or
// the error of a failed check.
type queues struct {
	mu      sync.Mutex
	waiting bool
	err     error
}

func (q *queues) set(waiting bool, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.waiting, q.err = waiting, err
}

func (q *queues) busy(context.Context) (bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.waiting, q.err
}

// busyBundle is a store on a fake clock holding one job of 3 published
// tasks with a task timeout of 1 s, and a reconciler that sees the
// fake queues, with an interval and a grace of 1 s: a task is stale once
// its last publish and the last busy check are more than 1 s + 1 s + 2 s
// (two intervals, the longest gap between checks that still sees
// everything) before now.
type busyBundle struct {
	store  *sqlite.Store
	job    warren.Job
	queues *queues
	clock  atomic.Int64
	passes atomic.Int64
	r      *reconciler.Reconciler
}

func setupBusy(t *testing.T) *busyBundle {
	t.Helper()
	ctx := context.Background()
	b := &busyBundle{queues: &queues{}}
	b.clock.Store(time.Now().UnixNano())
	s, err := sqlite.OpenWith(ctx, filepath.Join(t.TempDir(), "w.db"),
		sqlite.Options{Clock: func() time.Time { return time.Unix(0, b.clock.Load()) }})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	tasks := func(yield func(json.RawMessage, error) bool) {
		for range 3 {
			if !yield(json.RawMessage(`{}`), nil) {
				return
			}
		}
	}
	job, _, err := s.CreateJob(ctx, store.NewJob{Type: "t", Policy: warren.Policy{Reduce: "collect", MaxRetries: 3, TaskTimeout: time.Second}}, tasks)
	require.NoError(t, err)
	n, err := s.RelayBatch(ctx, 10, publishAll)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	b.store, b.job = s, job
	b.r, err = reconciler.New(reconciler.Config{
		Store: s, Interval: time.Second, Grace: time.Second, Busy: b.queues.busy,
		OnPass: func(store.ReconcileReport) { b.passes.Add(1) },
	})
	require.NoError(t, err)
	return b
}

// pass advances the clock by d and runs a pass.
func (b *busyBundle) pass(t *testing.T, d time.Duration) store.ReconcileReport {
	t.Helper()
	b.clock.Add(int64(d))
	rep, err := b.r.RunOnce(context.Background())
	require.NoError(t, err)
	return rep
}

// A backlog is not a loss: while a message waits in the queues, no task
// is stale however long ago it was published; once none waits, tasks are
// stale their task timeout plus the grace plus two intervals after the
// last check that saw one.
func TestWaitingMessagesHoldBackStaleTasks(t *testing.T) {
	t.Parallel()
	b := setupBusy(t)
	b.queues.set(true, nil)
	for i := range 100 {
		require.Zero(t, b.pass(t, time.Second).Requeued, "pass %d: a message waits", i)
	}
	b.queues.set(false, nil)
	for i := range 4 {
		require.Zero(t, b.pass(t, time.Second).Requeued, "%d s after the last busy check: not more than 4 s", i+1)
	}
	require.Equal(t, 3, b.pass(t, time.Microsecond).Requeued)
	require.Equal(t, int64(105), b.passes.Load(), "OnPass is called after every pass")
}

// With no sign either way (the broker cannot be asked), nothing is
// stale.
func TestAFailedCheckCountsAsBusy(t *testing.T) {
	t.Parallel()
	b := setupBusy(t)
	b.queues.set(false, errors.New("not connected to the broker"))
	for i := range 100 {
		require.Zero(t, b.pass(t, time.Second).Requeued, "pass %d: the queues cannot be seen", i)
	}
	b.queues.set(false, nil)
	for i := range 4 {
		require.Zero(t, b.pass(t, time.Second).Requeued, "%d s after the last failed check", i+1)
	}
	require.Equal(t, 3, b.pass(t, time.Second).Requeued)
}

// The first check, and a check more than two intervals after the one
// before it, count as busy: a message may have waited, unseen, until
// then.
func TestFirstAndLateChecksCountAsBusy(t *testing.T) {
	t.Parallel()
	b := setupBusy(t)
	require.Zero(t, b.pass(t, time.Hour).Requeued, "the first check, an hour after the publish")
	for i := range 4 {
		require.Zero(t, b.pass(t, time.Second).Requeued, "%d s after the first check", i+1)
	}
	require.Equal(t, 3, b.pass(t, time.Second).Requeued)

	_, err := b.store.RelayBatch(context.Background(), 10, publishAll)
	require.NoError(t, err)
	require.Zero(t, b.pass(t, time.Hour).Requeued, "a check an hour after the one before")
	require.Zero(t, b.pass(t, 2*time.Second).Requeued, "two intervals on: in time")
	require.Zero(t, b.pass(t, 2*time.Second).Requeued, "4 s after the late check")
	require.Equal(t, 3, b.pass(t, time.Second).Requeued)
}

func TestConfigRefusesANegativeGrace(t *testing.T) {
	t.Parallel()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "w.db"))
	require.NoError(t, err)
	defer s.Close()
	_, err = reconciler.New(reconciler.Config{Store: s, Grace: -time.Second})
	require.ErrorContains(t, err, "Config.Grace")
}
