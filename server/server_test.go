package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/client"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/reduce"
	"github.com/warrenhq/warren/server"
	"github.com/warrenhq/warren/store/sqlite"
	"github.com/warrenhq/warren/worker"
)

// count is a custom reducer: the number of completed tasks.
type count struct{ n int }

func (c *count) Add(_ int64, failed bool, _ json.RawMessage) error {
	if !failed {
		c.n++
	}
	return nil
}

func (c *count) Result() ([]byte, error) { return json.Marshal(c.n) }

func newCount() reduce.Reducer { return &count{} }

// setup returns a server configuration on a fresh topology and SQLite
// file, both removed when the test ends.
func setup(t *testing.T, tiers ...time.Duration) server.Config {
	t.Helper()
	// The topology's cleanup deletes the retry tiers it is told of: the
	// server declares its own.
	names, _ := amqptest.Topology(t, &broker.TopologyOptions{RetryTiers: tiers})
	return server.Config{AMQPURL: amqptest.URL(), Prefix: names.Prefix, Listen: "127.0.0.1:0", RetryTiers: tiers,
		DatabaseURL: "sqlite://" + filepath.Join(t.TempDir(), "warren.db")}
}

func TestRunServesAJobThroughTheAPI(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	cfg.Reducers = map[string]reduce.Factory{"count": newCount}
	srv, err := server.New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, srv.Start(ctx))
	require.ErrorIs(t, srv.Start(ctx), server.ErrStarted)
	require.True(t, strings.HasPrefix(srv.URL(), "http://127.0.0.1:"), srv.URL())

	w, err := worker.New(worker.Config{AMQPURL: cfg.AMQPURL, Prefix: cfg.Prefix, Concurrency: 4})
	require.NoError(t, err)
	w.Handle("len", func(_ context.Context, tk worker.Task) (any, error) {
		var s string
		if err := json.Unmarshal(tk.Payload, &s); err != nil {
			return nil, worker.Permanent(err)
		}
		return len(s), nil
	})
	wctx, stopWorker := context.WithCancel(ctx)
	werr := make(chan error, 1)
	go func() { werr <- w.Run(wctx) }()

	c := client.New(srv.URL())
	sub, err := c.Submit(ctx, client.JobSpec{Type: "len", Reduce: "sum",
		Tasks: []json.RawMessage{json.RawMessage(`"a"`), json.RawMessage(`"bb"`), json.RawMessage(`"ccc"`)}})
	require.NoError(t, err)
	wctx2, cancelWait := context.WithTimeout(ctx, time.Minute)
	defer cancelWait()
	job, err := c.Wait(wctx2, sub.ID, nil)
	require.NoError(t, err)
	require.EqualValues(t, "completed", job.State)
	res, err := c.Result(ctx, sub.ID)
	require.NoError(t, err)
	require.JSONEq(t, `6`, string(res))

	sub, err = c.Submit(ctx, client.JobSpec{Type: "len", Reduce: "count",
		Tasks: []json.RawMessage{json.RawMessage(`"a"`), json.RawMessage(`2`), json.RawMessage(`"c"`)}, ToleratedFailures: 1,
		ToleratedFailurePercent: 50})
	require.NoError(t, err, "the custom reducer is known to the API")
	job, err = c.Wait(wctx2, sub.ID, nil)
	require.NoError(t, err)
	require.EqualValues(t, "completed", job.State)
	res, err = c.Result(ctx, sub.ID)
	require.NoError(t, err)
	require.JSONEq(t, `2`, string(res), "the custom reducer ran when the job closed")

	_, err = c.Submit(ctx, client.JobSpec{Type: "len", Reduce: "nope", Tasks: []json.RawMessage{json.RawMessage(`"a"`)}})
	require.ErrorContains(t, err, "count", "the unknown-reducer error lists the custom reducer")

	stopWorker()
	require.NoError(t, <-werr)
	require.NoError(t, srv.Stop())
	require.NoError(t, srv.Stop(), "Stop twice is fine")
	select {
	case <-srv.Done():
	default:
		t.Fatal("Done is not closed after Stop")
	}
}

func TestStartFailsInOneLineWhenTheBrokerIsDown(t *testing.T) {
	t.Parallel()
	srv, err := server.New(server.Config{AMQPURL: "amqp://guest:secret@127.0.0.1:1/", Listen: "127.0.0.1:0",
		DatabaseURL: "sqlite://" + filepath.Join(t.TempDir(), "warren.db")})
	require.NoError(t, err)
	err = srv.Start(context.Background())
	require.Error(t, err)
	require.NotContains(t, err.Error(), "\n")
	require.NotContains(t, err.Error(), "secret", "the password is redacted")
	require.NoError(t, srv.Stop(), "nothing ran, so nothing failed")
}

// Retry tiers must increase: a later retry never waits less than an
// earlier one, and two equal tiers would be one queue.
func TestNewRefusesRetryTiersThatDoNotIncrease(t *testing.T) {
	t.Parallel()
	for _, tiers := range [][]time.Duration{
		{5 * time.Second, time.Second},
		{time.Second, 30 * time.Second, 30 * time.Second},
		{time.Second, time.Minute, 10 * time.Second},
	} {
		_, err := server.New(server.Config{RetryTiers: tiers})
		require.Error(t, err, "%v", tiers)
		require.ErrorContains(t, err, "Config.RetryTiers")
		require.ErrorContains(t, err, "tiers must increase, such as 1s,5s,30s,2m,10m")
	}
	_, err := server.New(server.Config{RetryTiers: []time.Duration{time.Second, 2 * time.Second}})
	require.NoError(t, err)
}

// The server hands its limits to the API (the per-task limit, the body
// timeout, its retry tiers) and closes idle keep-alive connections.
func TestServerLimitsUploadsAndIdleConnections(t *testing.T) {
	t.Parallel()
	cfg := setup(t, time.Second, 2*time.Second)
	cfg.MaxTaskBytes = 100
	cfg.BodyTimeout = 300 * time.Millisecond
	cfg.IdleTimeout = 300 * time.Millisecond
	srv, err := server.New(cfg)
	require.NoError(t, err)
	require.NoError(t, srv.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, srv.Stop()) })
	addr := strings.TrimPrefix(srv.URL(), "http://")

	submit := func(spec string) (int, string) {
		resp, err := http.Post(srv.URL()+"/v1/jobs", "application/json", strings.NewReader(spec))
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	// 5 retries wait 1 + 2 + 2 + 2 + 2 = 9 s in these tiers.
	status, body := submit(`{"type":"echo","max_retries":5,"task_timeout":10,"tasks":[1]}`)
	require.Equal(t, http.StatusAccepted, status, body)
	status, body = submit(`{"type":"echo","max_retries":5,"task_timeout":9,"tasks":[1]}`)
	require.Equal(t, http.StatusUnprocessableEntity, status, body)
	require.Contains(t, body, "retry tiers (1s, 2s, the last repeating)")
	status, body = submit(`{"type":"echo","tasks":[1,"` + strings.Repeat("x", 100) + `"]}`)
	require.Equal(t, http.StatusRequestEntityTooLarge, status, body)
	require.Contains(t, body, "task 2 is 102 bytes, over the limit of 100 bytes per task")

	// A stalled upload is cut, and its connection closed.
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "POST /v1/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/x-ndjson\r\nContent-Length: 100\r\n\r\n{\"type\":\"echo\"}\n")
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	require.NoError(t, err, "a stalled upload is answered")
	require.Equal(t, http.StatusRequestTimeout, resp.StatusCode)
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	_, err = r.ReadByte()
	require.ErrorIs(t, err, io.EOF, "and its connection closed")

	// An idle keep-alive connection is closed after IdleTimeout.
	idle, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer idle.Close()
	_, err = io.WriteString(idle, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
	require.NoError(t, err)
	require.NoError(t, idle.SetReadDeadline(time.Now().Add(10*time.Second)))
	r = bufio.NewReader(idle)
	resp, err = http.ReadResponse(r, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	require.False(t, resp.Close, "the connection is kept alive")
	_, err = r.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the server closes an idle keep-alive connection")
}

// The server deletes closed jobs past their retention in the background,
// and a job deleted through the API has its tasks purged at once; both
// are counted in /metrics. Config.Retention < 0 keeps the jobs without a
// retention of their own forever.
func TestRetentionSweepDeletesExpiredJobs(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	cfg.Retention = -1
	cfg.RetentionInterval = 100 * time.Millisecond
	type sweep struct{ jobs, tasks int }
	sweeps := make(chan sweep, 100)
	cfg.Hooks.OnRetentionSweep = func(jobs, tasks int) {
		if jobs+tasks > 0 {
			sweeps <- sweep{jobs, tasks}
		}
	}
	srv, err := server.New(cfg)
	require.NoError(t, err)
	require.NoError(t, srv.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, srv.Stop()) })
	c := client.New(srv.URL())
	ctx := t.Context()
	tasks := []json.RawMessage{json.RawMessage(`1`), json.RawMessage(`2`), json.RawMessage(`3`)}

	expiring, err := c.Submit(ctx, client.JobSpec{Type: "echo", Retention: 1, Tasks: tasks})
	require.NoError(t, err)
	kept, err := c.Submit(ctx, client.JobSpec{Type: "echo", Tasks: tasks})
	require.NoError(t, err)
	for _, id := range []string{expiring.ID, kept.ID} {
		_, err := c.Cancel(ctx, id)
		require.NoError(t, err)
	}
	require.Equal(t, sweep{jobs: 1, tasks: 3}, waitSweep(t, sweeps), "the job with a retention of 1 s")
	_, err = c.Get(ctx, expiring.ID)
	require.True(t, client.IsNotFound(err), "%v", err)
	job, err := c.Get(ctx, kept.ID)
	require.NoError(t, err)
	require.Nil(t, job.Retention, "kept forever")

	require.NoError(t, c.Delete(ctx, kept.ID))
	require.Equal(t, sweep{jobs: 0, tasks: 3}, waitSweep(t, sweeps), "the deletion wakes the sweeper")

	resp, err := http.Get(srv.URL() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, line := range []string{
		`warren_jobs_deleted_total{reason="api"} 1`,
		`warren_jobs_deleted_total{reason="expired"} 1`,
		`warren_tasks_purged_total 6`,
	} {
		require.Contains(t, string(body), line+"\n")
	}
}

// waitSweep returns the next retention sweep that did something.
func waitSweep[T any](t *testing.T, sweeps <-chan T) T {
	t.Helper()
	select {
	case s := <-sweeps:
		return s
	case <-time.After(30 * time.Second):
		t.Fatal("no retention sweep deleted anything within 30 s")
		var zero T
		return zero
	}
}

// A server without tokens answers to localhost, IP addresses, its listen
// address's name and Config.AllowedHosts, and to no other Host: a page
// whose name an attacker points at 127.0.0.1 (DNS rebinding) reads
// nothing. A state-changing request a browser sends from another origin
// is refused.
func TestServerWithoutTokensAnswersOnlyToItsOwnNames(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	cfg.Listen = "localhost:0"
	cfg.AllowedHosts = []string{"warren.internal"}
	srv, err := server.New(cfg)
	require.NoError(t, err)
	require.NoError(t, srv.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, srv.Stop()) })
	_, port, err := net.SplitHostPort(strings.TrimPrefix(srv.URL(), "http://"))
	require.NoError(t, err)

	call := func(method, host, origin string) int {
		req, err := http.NewRequestWithContext(t.Context(), method, srv.URL()+"/v1/jobs", strings.NewReader(`{"type":"echo","tasks":[1]}`))
		require.NoError(t, err)
		req.Host = host
		req.Header.Set("Content-Type", "application/json")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	for _, host := range []string{"localhost:" + port, "127.0.0.1:" + port, "warren.internal:" + port} {
		require.Equal(t, http.StatusOK, call(http.MethodGet, host, ""), host)
	}
	require.Equal(t, http.StatusMisdirectedRequest, call(http.MethodGet, "rebound.example:"+port, ""))
	require.Equal(t, http.StatusMisdirectedRequest, call(http.MethodPost, "rebound.example:"+port, ""))
	require.Equal(t, http.StatusForbidden, call(http.MethodPost, "localhost:"+port, "https://attacker.example"))
	require.Equal(t, http.StatusAccepted, call(http.MethodPost, "localhost:"+port, "http://localhost:"+port), "the dashboard's own origin")
	require.Equal(t, http.StatusAccepted, call(http.MethodPost, "localhost:"+port, ""), "a client that is not a browser")
}

// TestSecondServerOnOneSQLiteFileRefusesToStart: SQLite is the store of
// one server; a second server on the same file does not start, and says
// why, while the first keeps serving.
func TestSecondServerOnOneSQLiteFileRefusesToStart(t *testing.T) {
	t.Parallel()
	cfg := setup(t)
	first, err := server.New(cfg)
	require.NoError(t, err)
	require.NoError(t, first.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, first.Stop()) })

	second, err := server.New(cfg)
	require.NoError(t, err)
	err = second.Start(context.Background())
	require.ErrorIs(t, err, sqlite.ErrInUse)
	require.Contains(t, err.Error(), "is in use by another warren server")
	require.Contains(t, err.Error(), "use PostgreSQL for several")

	resp, err := http.Get(first.URL() + "/readyz")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode, "the first server still serves")
}
