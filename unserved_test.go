package warren_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/worker"
)

// unservedTopology has short retry tiers: a task no worker here serves
// comes back within a second.
var unservedTopology = &broker.TopologyOptions{RetryTiers: []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, time.Second}}

// A job of a type that the queue's only worker does not serve does not
// fail: its job page says no live worker serves the type, and once a
// worker that serves it starts, the job completes, nothing dead-lettered.
// Before, the first worker dead-lettered every task unknown_type at once.
func TestATypeNoWorkerServesWaitsForOne(t *testing.T) {
	t.Parallel()
	b := setupWith(t, "sqlite", unservedTopology)
	srv := b.startServer(t, b.store)
	var unserved atomic.Int64
	connected := make(chan struct{}, 1)
	cfg := b.workerConfig(4)
	cfg.OnEvent = func(ev worker.Event) {
		if ev.Kind == worker.EventConnected {
			connected <- struct{}{}
		}
		if ev.Kind == worker.EventUnserved {
			unserved.Add(1)
			b.ping()
		}
	}
	doubles, err := worker.New(cfg)
	require.NoError(t, err)
	doubles.Handle("double", func(context.Context, worker.Task) (any, error) { return 0, nil })
	runWorker(t, doubles)
	select {
	case <-connected: // it consumes the queue: the relay's reading finds a consumer
	case <-time.After(waitTimeout):
		t.Fatal("the worker did not connect")
	}

	job := b.submitTyped(t, "render", 5, warren.Policy{TaskTimeout: time.Minute})
	b.waitFor(t, func() bool { return unserved.Load() >= 5 }, "every task bounced")

	// The server has heard the worker's first heartbeat (sent as it
	// starts), so the job says why it waits.
	var waiting struct {
		Waiting *struct{ Reason, Queue, Type string } `json:"waiting"`
	}
	deadline := time.Now().Add(waitTimeout)
	for waiting.Waiting == nil && time.Now().Before(deadline) {
		resp, err := http.Get(srv.URL() + "/v1/jobs/" + job.ID)
		require.NoError(t, err)
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&waiting))
		_ = resp.Body.Close()
		if waiting.Waiting == nil {
			time.Sleep(50 * time.Millisecond) // the heartbeat has no hook here
		}
	}
	require.NotNil(t, waiting.Waiting)
	require.Equal(t, "no_worker_for_type", waiting.Waiting.Reason)
	require.Equal(t, "render", waiting.Waiting.Type)
	require.Equal(t, "default", waiting.Waiting.Queue)

	renders, err := worker.New(b.workerConfig(4))
	require.NoError(t, err)
	renders.Handle("render", func(context.Context, worker.Task) (any, error) { return "frame", nil })
	runWorker(t, renders)
	require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID))
	got, err := b.store.GetJob(context.Background(), job.ID)
	require.NoError(t, err)
	require.EqualValues(t, 5, got.CompletedTasks)
	require.Zero(t, amqptest.QueueDepth(t, b.admin, b.names.TasksDLQ), "no task was dead-lettered")
}

// With no worker for its type, a job's tasks fail unknown_type once
// they went unserved for the job's task_timeout: not at once, not never.
func TestATypeNoWorkerServesFailsAfterTheTaskTimeout(t *testing.T) {
	t.Parallel()
	b := setupWith(t, "sqlite", unservedTopology)
	b.startServer(t, b.store)
	doubles, err := worker.New(b.workerConfig(4))
	require.NoError(t, err)
	doubles.Handle("double", func(context.Context, worker.Task) (any, error) { return 0, nil })
	runWorker(t, doubles)

	const timeout = 2 * time.Second
	start := time.Now()
	job := b.submitTyped(t, "rendr", 2, warren.Policy{TaskTimeout: timeout})
	require.Equal(t, warren.JobFailed, b.waitClosed(t, job.ID))
	elapsed := time.Since(start)
	require.GreaterOrEqual(t, elapsed, timeout, "the tasks waited out the task timeout")
	require.Less(t, elapsed, timeout+3*time.Second)
	tasks, _, err := b.store.ListTasks(context.Background(), job.ID, store.ListTasksOpts{})
	require.NoError(t, err)
	require.Len(t, tasks, 2)
	for _, tk := range tasks {
		require.Equal(t, warren.TaskFailed, tk.State)
		require.Contains(t, tk.Error, `no live worker serves type "rendr" on queue "default" (for 2s)`)
		require.Equal(t, 1, tk.Attempts, "bounces are no attempts")
	}
}
