package reconciler_test

import (
	"context"
	"encoding/json"
	"path/filepath"
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
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "w.db"))
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

	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	var requeued atomic.Int64
	var ready []string
	r, err := reconciler.New(reconciler.Config{
		Store: s, BatchSize: 2,
		Now:            func() time.Time { return time.Unix(0, clock.Load()) },
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
