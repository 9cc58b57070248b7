package warren_test

// End-to-end tests of pause and resume (docs/operations.md, "Pausing a
// job or a queue") against a real server, worker, broker and store.

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
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

// pauseTopology has short retry tiers: a held task comes back within
// 300 ms, so a resumed job's tasks run again at once.
var pauseTopology = &broker.TopologyOptions{RetryTiers: []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, time.Second}}

// Paused mid-run (the job, or its work queue), a job starts no task from
// the pause's answer to its resume: the tasks that were running finish
// and count, the messages already in the broker go back without running
// and without spending an attempt, and after the resume the job
// completes with every task run once and counted once.
func TestPauseMidJobStartsNoTaskUntilTheResume(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, kind, target string }{
		{"job/sqlite", "sqlite", "job"},
		{"job/postgres", "postgres", "job"},
		{"queue/sqlite", "sqlite", "queue"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testPauseMidJob(t, tc.kind, tc.target)
		})
	}
}

func testPauseMidJob(t *testing.T, kind, target string) {
	const (
		tasks       = 40
		concurrency = 4
	)
	b := setupWith(t, kind, pauseTopology)
	srv := b.startServer(t, b.store)

	var (
		mu     sync.Mutex
		starts []time.Time       // when each handler run started
		runs   = map[int64]int{} // runs per task id
	)
	running := make(chan struct{}, tasks)
	release := make(chan struct{})
	var held atomic.Int64
	cfg := b.workerConfig(concurrency)
	cfg.OnEvent = func(ev worker.Event) {
		if ev.Kind == worker.EventHeld {
			held.Add(1)
			b.ping()
		}
	}
	w, err := worker.New(cfg)
	require.NoError(t, err)
	w.Handle("double", func(ctx context.Context, tk worker.Task) (any, error) {
		mu.Lock()
		starts = append(starts, time.Now())
		runs[tk.TaskID]++
		mu.Unlock()
		running <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		var p struct{ N int }
		_ = json.Unmarshal(tk.Payload, &p)
		return 2 * p.N, nil
	})
	runWorker(t, w)

	job := b.submit(t, tasks, warren.Policy{TaskTimeout: time.Minute})
	for range concurrency {
		recv(t, running, "a task running before the pause")
	}

	pausePath := "/v1/jobs/" + job.ID
	if target == "queue" {
		pausePath = "/v1/queues/default"
	}
	asked := time.Now()
	body := post(t, srv.URL()+pausePath+"/pause")
	require.Equal(t, true, body["paused"], "%v", body)
	require.Nil(t, body["warnings"], "the workers were told")
	paused := time.Now()
	t.Logf("the pause answered in %v", paused.Sub(asked))

	close(release) // the runs under way finish, and count
	var got warren.Job
	b.waitFor(t, func() bool {
		got, err = b.store.GetJob(context.Background(), job.ID)
		require.NoError(t, err)
		return held.Load() >= 2*concurrency && got.CompletedTasks == concurrency
	}, "the runs under way counted, and the tasks in the broker went back, twice over")
	require.False(t, got.State.Terminal())
	require.Equal(t, target == "job", got.Paused())
	resumed := time.Now()
	mu.Lock()
	for i, at := range starts {
		require.False(t, at.After(paused) && at.Before(resumed), "run %d started at %v, while paused (%v to %v)", i, at, paused, resumed)
	}
	require.Len(t, starts, concurrency, "no run started while paused")
	mu.Unlock()

	body = post(t, srv.URL()+pausePath+"/resume")
	require.Equal(t, false, body["paused"], "%v", body)
	require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID))
	t.Logf("from the resume to the close of the job's %d other tasks: %v", tasks-concurrency, time.Since(resumed))
	b.expectDoubled(t, job.ID, tasks)
	mu.Lock()
	require.Len(t, runs, tasks)
	for id, n := range runs {
		require.Equal(t, 1, n, "task %d ran once", id)
	}
	mu.Unlock()
	list, _, err := b.store.ListTasks(context.Background(), job.ID, store.ListTasksOpts{Limit: tasks + 1})
	require.NoError(t, err)
	for _, tk := range list {
		require.Equal(t, 1, tk.Attempts, "task %d: the holds spent no attempt", tk.TaskID)
	}
	require.Zero(t, amqptest.QueueDepth(t, b.admin, b.names.TasksDLQ), "nothing dead-lettered")
}

// post POSTs to url with no body and returns its 200 answer's JSON.
func post(t *testing.T, url string) map[string]any {
	t.Helper()
	resp, err := http.Post(url, "application/json", nil)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%v", out)
	return out
}

// recv receives from c, or fails the test after waitTimeout.
func recv[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}
