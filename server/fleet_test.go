package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/client"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/server"
	"github.com/warrenhq/warren/worker"
)

type workerJSON struct {
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	Queues      []string  `json:"queues"`
	Types       []string  `json:"types"`
	Concurrency int       `json:"concurrency"`
	InFlight    int       `json:"in_flight"`
	StartedAt   time.Time `json:"started_at"`
	LastSeen    time.Time `json:"last_seen"`
	Alive       bool      `json:"alive"`
}

type queueJSON struct {
	Name           string `json:"name"`
	Kind           string `json:"kind"`
	Messages       int    `json:"messages"`
	Consumers      int    `json:"consumers"`
	DeadLetters1m  *int64 `json:"dead_letters_1m"`
	DeadLetters15m *int64 `json:"dead_letters_15m"`
}

// A real worker appears in GET /v1/workers with its fields from its
// first heartbeat, its tasks in flight follow, and it is gone after its
// goodbye; GET /v1/queues shows it consuming the default queue; the job
// duration is observed when the job closes, and when one is cancelled.
func TestWorkersQueuesAndJobDuration(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	beats := make(chan string, 1000) // states of the heartbeats recorded
	closed := make(chan string, 10)
	cfg.Hooks.OnWorkerHeartbeat = func(_, state string) { beats <- state }
	cfg.Hooks.OnJobClosed = func(id string, _ warren.JobState) { closed <- id }
	srv, err := server.New(cfg)
	require.NoError(t, err)
	require.NoError(t, srv.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, srv.Stop()) })

	w, err := worker.New(worker.Config{AMQPURL: cfg.AMQPURL, Prefix: cfg.Prefix, Name: "fleet-1", Concurrency: 2,
		HeartbeatInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	release := make(chan struct{})
	running := make(chan struct{}, 1)
	w.Handle("hold", func(context.Context, worker.Task) (any, error) {
		running <- struct{}{}
		<-release
		return 1, nil
	})
	wctx, stopWorker := context.WithCancel(context.Background())
	werr := make(chan error, 1)
	go func() { werr <- w.Run(wctx) }()
	t.Cleanup(stopWorker)

	wait(t, beats, "a heartbeat")
	list := workers(t, srv)
	require.Len(t, list, 1)
	wk := list[0]
	require.NotEmpty(t, wk.ID)
	require.Equal(t, "fleet-1", wk.Name)
	require.Equal(t, []string{protocol.DefaultQueue}, wk.Queues)
	require.Equal(t, []string{"hold"}, wk.Types)
	require.Equal(t, 2, wk.Concurrency)
	require.True(t, wk.Alive)
	require.WithinDuration(t, time.Now(), wk.LastSeen, time.Minute)
	require.False(t, wk.StartedAt.After(wk.LastSeen))

	queues := map[string]queueJSON{}
	for _, q := range getQueues(t, srv) {
		queues[q.Name] = q
	}
	tasks := queues[cfg.Prefix+"tasks.q"]
	require.Equal(t, "work", tasks.Kind)
	require.Equal(t, 1, tasks.Consumers, "the worker consumes the default queue")
	require.Equal(t, "results", queues[cfg.Prefix+"results.q"].Kind)
	require.Equal(t, "retry", queues[cfg.Prefix+"retry.5s.q"].Kind)
	dlq := queues[cfg.Prefix+"tasks.dlq"]
	require.Equal(t, "dead", dlq.Kind)
	require.Nil(t, dlq.DeadLetters15m, "not known before 15 minutes of samples")

	c := client.New(srv.URL())
	sub, err := c.Submit(t.Context(), client.JobSpec{Type: "hold", Tasks: []json.RawMessage{json.RawMessage(`1`)}})
	require.NoError(t, err)
	wait(t, running, "the task to run")
	for workers(t, srv)[0].InFlight != 1 {
		wait(t, beats, "a heartbeat with the task in flight")
	}
	close(release)
	require.Equal(t, sub.ID, wait(t, closed, "the job's close"))
	require.Contains(t, scrape(t, srv), `warren_job_duration_seconds_count{state="completed",type="hold"} 1`)
	for workers(t, srv)[0].InFlight != 0 {
		wait(t, beats, "a heartbeat without the task")
	}

	sub, err = c.Submit(t.Context(), client.JobSpec{Type: "nobody-runs-this", Tasks: []json.RawMessage{json.RawMessage(`1`)}})
	require.NoError(t, err)
	_, err = c.Cancel(t.Context(), sub.ID)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return strings.Contains(scrape(t, srv), `warren_job_duration_seconds_count{state="cancelled",type="nobody-runs-this"} 1`)
	}, 10*time.Second, 20*time.Millisecond, "the cancelled job's duration is observed in the background")
	require.Contains(t, scrape(t, srv), `warren_queue_consumers{queue="`+cfg.Prefix+`tasks.q"} 1`)

	stopWorker()
	require.NoError(t, <-werr)
	for wait(t, beats, "the goodbye") != protocol.HeartbeatStopping {
	}
	require.Empty(t, workers(t, srv), "a worker that said goodbye is dropped")
}

func wait[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s within 30s", what)
		panic("unreachable")
	}
}

func getJSON(t *testing.T, url string, out any) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	require.NoError(t, json.Unmarshal(body, out), "%s", body)
}

func workers(t *testing.T, srv *server.Server) []workerJSON {
	t.Helper()
	var out struct{ Workers []workerJSON }
	getJSON(t, srv.URL()+"/v1/workers", &out)
	return out.Workers
}

func getQueues(t *testing.T, srv *server.Server) []queueJSON {
	t.Helper()
	var out struct{ Queues []queueJSON }
	getJSON(t, srv.URL()+"/v1/queues", &out)
	return out.Queues
}

func scrape(t *testing.T, srv *server.Server) string {
	t.Helper()
	resp, err := http.Get(srv.URL() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(body)
}
