package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// TestMain removes the binary built for the end-to-end tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if binary != "" {
		_ = os.RemoveAll(filepath.Dir(binary))
	}
	os.Exit(code)
}

// warrenBinary builds ./cmd/warren once per test run.
func warrenBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "warren-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "warren")
		out, err := exec.Command("go", "build", "-race", "-o", binary, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return binary
}

// process is a running warren command.
type process struct {
	cmd *exec.Cmd
	out *syncBuffer
}

// syncBuffer collects a process's output while the test may read it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func start(t *testing.T, env []string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(warrenBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	p := &process{cmd: cmd, out: out}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return p
}

// stop sends SIGTERM and returns the exit code.
func (p *process) stop(t *testing.T) int {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("%v did not stop on SIGTERM:\n%s", p.cmd.Args, p.out)
	}
	return p.cmd.ProcessState.ExitCode()
}

// freeAddr returns a loopback address with a port nobody listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// waitReady polls the server's /readyz (another process: there is no
// signal to wait on).
func waitReady(t *testing.T, base string, server *process) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("server not ready: %v\n%s", err, server.out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runBinary runs a warren command to its end and returns its exit code
// and output.
func runBinary(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(warrenBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("%v: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// The real binaries: one server and two workers; a 500-task job submitted
// over HTTP with `warren submit`, watched to completion with `warren
// watch`, its result in task order; all stop cleanly on SIGTERM.
func TestServerAndWorkersCloseAJob(t *testing.T) {
	t.Parallel()
	names, _ := amqptest.Topology(t, nil)
	addr := freeAddr(t)
	env := []string{
		"WARREN_AMQP_URL=" + amqptest.URL(),
		"WARREN_DATABASE_URL=sqlite://" + filepath.Join(t.TempDir(), "warren.db"),
		"WARREN_PREFIX=" + names.Prefix,
		"WARREN_LISTEN=" + addr,
	}
	server := start(t, env, "server")
	w1 := start(t, env, "worker", "--concurrency", "4")
	w2 := start(t, env, "worker", "--types", "echo", "--concurrency", "4")
	base := "http://" + addr
	waitReady(t, base, server)

	const n = 500
	tasks := make([]json.RawMessage, n)
	for i := range tasks {
		tasks[i] = json.RawMessage(fmt.Sprintf(`{"i":%d}`, i+1))
	}
	spec, err := json.Marshal(map[string]any{"type": "echo", "tasks": tasks})
	require.NoError(t, err)
	specFile := filepath.Join(t.TempDir(), "job.json")
	require.NoError(t, os.WriteFile(specFile, spec, 0o644))

	code, out, errOut := runBinary(t, env, "submit", specFile, "--reduce", "collect")
	require.Equal(t, 0, code, errOut)
	id := strings.TrimSpace(out)
	require.NotEmpty(t, id)

	code, out, errOut = runBinary(t, env, "watch", id)
	require.Equal(t, 0, code, "watch: %s %s\nserver:\n%s", out, errOut, server.out)
	require.Contains(t, out, "completed")

	code, out, errOut = runBinary(t, env, "status", id, "--json")
	require.Equal(t, 0, code, errOut)
	var status struct {
		State          string `json:"state"`
		CompletedTasks int64  `json:"completed_tasks"`
		ResultURL      string `json:"result_url"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &status))
	require.Equal(t, "completed", status.State)
	require.Equal(t, int64(n), status.CompletedTasks)

	resp, err := http.Get(base + status.ResultURL)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var result []struct{ I int }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&result))
	require.Len(t, result, n)
	for i, r := range result {
		require.Equal(t, i+1, r.I)
	}

	require.Equal(t, 0, w1.stop(t), "worker 1:\n%s", w1.out)
	require.Equal(t, 0, w2.stop(t), "worker 2:\n%s", w2.out)
	require.Equal(t, 0, server.stop(t), "server:\n%s", server.out)
}

// Without API tokens the server refuses a non-loopback address.
func TestServerWithoutTokensStaysOnLoopback(t *testing.T) {
	t.Parallel()
	code, _, errOut := runCLI(t, map[string]string{"WARREN_LISTEN": "0.0.0.0:0"}, "server")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "refusing to listen")
	require.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, "one line: %q", errOut)
}

// The failure commands with the real binaries: a task that fails until a
// moment passes is dead-lettered and its job fails; `warren dlq list`
// shows it pending, `warren redrive` reruns it once the cause cleared,
// after which its dead letter is listed as settled (not pending), and
// `warren dlq purge --settled` clears it.
func TestFailureCommands(t *testing.T) {
	t.Parallel()
	names, _ := amqptest.Topology(t, &broker.TopologyOptions{RetryTiers: []time.Duration{50 * time.Millisecond}})
	addr := freeAddr(t)
	env := []string{
		"WARREN_AMQP_URL=" + amqptest.URL(),
		"WARREN_DATABASE_URL=sqlite://" + filepath.Join(t.TempDir(), "warren.db"),
		"WARREN_PREFIX=" + names.Prefix,
		"WARREN_LISTEN=" + addr,
		"WARREN_RETRY_TIERS=50ms",
		"WARREN_API_TOKENS=root:admin",
	}
	server := start(t, env, "server")
	w := start(t, env, "worker", "--types", "flaky")
	waitReady(t, "http://"+addr, server)

	until := time.Now().Add(1500 * time.Millisecond).UTC()
	spec := fmt.Sprintf(`{"type":"flaky","max_retries":1,"tasks":[{"value":1},{"value":2,"fail_until":%q},{"value":3}]}`, until.Format(time.RFC3339Nano))
	specFile := filepath.Join(t.TempDir(), "job.json")
	require.NoError(t, os.WriteFile(specFile, []byte(spec), 0o644))
	code, out, errOut := runBinary(t, env, "submit", specFile)
	require.Equal(t, 0, code, errOut)
	id := strings.TrimSpace(out)

	code, out, _ = runBinary(t, env, "watch", id)
	require.Equal(t, 1, code, "a failed job: %s", out)
	require.Contains(t, out, "state     failed")

	code, out, errOut = runBinary(t, env, "dlq", "list", "--job", id, "--json")
	require.Equal(t, 0, code, errOut)
	var dead []struct {
		JobID      string `json:"job_id"`
		TaskID     int64  `json:"task_id"`
		RoutingKey string `json:"routing_key"`
		Reason     string `json:"reason"`
		Error      string `json:"error"`
		Attempts   int    `json:"attempts"`
		Pending    bool   `json:"pending"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &dead), out)
	require.Len(t, dead, 1)
	require.True(t, dead[0].Pending, "the task is failed: a replay or a redrive would run it")
	require.Equal(t, int64(2), dead[0].TaskID)
	require.Equal(t, "task.failed", dead[0].RoutingKey)
	require.Equal(t, "retries_exhausted", dead[0].Reason)
	require.Equal(t, 2, dead[0].Attempts)
	require.Contains(t, dead[0].Error, "failing until")

	// The cause clears when fail_until passes: that moment is the
	// condition itself, so the test waits for it.
	time.Sleep(time.Until(until))
	code, out, errOut = runBinary(t, env, "redrive", id)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "running again")
	code, out, errOut = runBinary(t, env, "watch", id)
	require.Equal(t, 0, code, "%s %s", out, errOut)

	// The redrive settled the dead letter: it is no longer pending.
	code, out, errOut = runBinary(t, env, "dlq", "list", "--job", id)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^`+id+`\s+2\s+settled:resent\s+task\.failed\s+retries_exhausted\s+2\s`, out)
	code, out, errOut = runBinary(t, env, "dlq", "list", "--pending", "--json")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "[]", strings.TrimSpace(out), "nothing is left to do")

	code, out, errOut = runBinary(t, env, "dlq", "purge", "--settled", "--job", id)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "purged 1")
	code, out, errOut = runBinary(t, env, "dlq", "purge", "--all", "--json")
	require.Equal(t, 0, code, errOut)
	require.JSONEq(t, `{"purged": 0}`, out)
	code, out, _ = runBinary(t, env, "dlq", "list", "--json")
	require.Equal(t, 0, code)
	require.Equal(t, "[]", strings.TrimSpace(out))

	code, _, errOut = runBinary(t, []string{"WARREN_LISTEN=" + addr, "WARREN_TOKEN=nope"}, "dlq", "list")
	require.Equal(t, exitError, code)
	require.Contains(t, errOut, "401")

	require.Equal(t, 0, w.stop(t), "worker:\n%s", w.out)
	require.Equal(t, 0, server.stop(t), "server:\n%s", server.out)
}

// SIGTERM lets a worker finish its in-flight task; a second signal, a
// second or more after the first, exits at once, and the interrupted task is not lost: another worker runs it.
func TestSecondSignalExitsAtOnceLosingNothing(t *testing.T) {
	t.Parallel()
	names, _ := amqptest.Topology(t, nil)
	addr := freeAddr(t)
	env := []string{
		"WARREN_AMQP_URL=" + amqptest.URL(),
		"WARREN_DATABASE_URL=sqlite://" + filepath.Join(t.TempDir(), "warren.db"),
		"WARREN_PREFIX=" + names.Prefix,
		"WARREN_LISTEN=" + addr,
	}
	server := start(t, env, "server")
	waitReady(t, "http://"+addr, server)
	w := start(t, env, "worker", "--types", "sleep", "--concurrency", "1")

	specFile := filepath.Join(t.TempDir(), "job.json")
	require.NoError(t, os.WriteFile(specFile, []byte(`{"type":"sleep","reduce":"none","tasks":[{"ms":600000}]}`), 0o644))
	code, out, errOut := runBinary(t, env, "submit", specFile)
	require.Equal(t, 0, code, errOut)
	id := strings.TrimSpace(out)

	// Wait until the worker holds the task: the task is queued and the
	// work queue is empty.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(w.out.String(), "warren worker running") ||
		amqptest.QueueDepth(t, amqptest.Dial(t), names.TasksQueue) != 0 {
		require.True(t, time.Now().Before(deadline), "the worker never took the task:\n%s", w.out)
		time.Sleep(50 * time.Millisecond)
	}

	require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
	// Signals of one kind sent back to back may merge into one: send the
	// second after the first was handled.
	for !strings.Contains(w.out.String(), "shutting down") {
		require.True(t, time.Now().Before(deadline), "the first signal was not handled:\n%s", w.out)
		time.Sleep(20 * time.Millisecond)
	}
	done := make(chan struct{})
	go func() { _ = w.cmd.Wait(); close(done) }()
	// A second signal within a second of the first is the same request
	// to stop (timeout signals the process and its group at once): the
	// worker goes on finishing its task.
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
	// The grace is wall-clock time: nothing to wait on but the clock.
	time.Sleep(signalGrace + 200*time.Millisecond)
	select {
	case <-done:
		t.Fatalf("a signal right after the first stopped the worker at once:\n%s", w.out)
	default:
	}
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("a second signal did not stop the worker at once:\n%s", w.out)
	}
	require.Equal(t, 130, w.cmd.ProcessState.ExitCode(), "worker:\n%s", w.out)

	// The task comes back; a short-sleeping worker would run it, but this
	// one sleeps for ten minutes: check it is back in the queue instead.
	deadline = time.Now().Add(30 * time.Second)
	for amqptest.QueueDepth(t, amqptest.Dial(t), names.TasksQueue) != 1 {
		require.True(t, time.Now().Before(deadline), "the interrupted task did not return to the queue")
		time.Sleep(50 * time.Millisecond)
	}
	code, out, _ = runBinary(t, env, "status", id)
	require.Equal(t, 0, code)
	require.Contains(t, out, "1 pending")
	require.Equal(t, 0, server.stop(t), "server:\n%s", server.out)
}

// closeConnections makes the broker close every connection whose client
// name contains name, as a broker restart or a network cut would.
func closeConnections(t *testing.T, name string) int {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", "-q", "list_connections", "pid", "client_properties").Output()
	require.NoError(t, err)
	closed := 0
	for _, line := range strings.Split(string(out), "\n") {
		pid, props, ok := strings.Cut(line, "\t")
		if !ok || !strings.HasPrefix(pid, "<") || !strings.Contains(props, `"connection_name","`+name+`"`) {
			continue
		}
		if err := exec.Command("rabbitmqctl", "-q", "close_connection", pid, "test: connection cut").Run(); err == nil {
			closed++
		}
	}
	return closed
}

// The server survives its broker connections being cut: it reconnects,
// and jobs submitted before and after the cut complete exactly.
func TestServerReconnectsAfterTheBrokerClosesItsConnections(t *testing.T) {
	t.Parallel()
	names, _ := amqptest.Topology(t, nil)
	addr := freeAddr(t)
	env := []string{
		"WARREN_AMQP_URL=" + amqptest.URL(),
		"WARREN_DATABASE_URL=sqlite://" + filepath.Join(t.TempDir(), "warren.db"),
		"WARREN_PREFIX=" + names.Prefix,
		"WARREN_LISTEN=" + addr,
	}
	server := start(t, env, "server")
	waitReady(t, "http://"+addr, server)
	w := start(t, env, "worker", "--types", "echo")

	submit := func(n int) string {
		tasks := make([]string, n)
		for i := range tasks {
			tasks[i] = fmt.Sprint(i + 1)
		}
		specFile := filepath.Join(t.TempDir(), "job.json")
		require.NoError(t, os.WriteFile(specFile, []byte(`{"type":"echo","reduce":"sum","tasks":[`+strings.Join(tasks, ",")+`]}`), 0o644))
		code, out, errOut := runBinary(t, env, "submit", specFile)
		require.Equal(t, 0, code, errOut)
		return strings.TrimSpace(out)
	}
	first := submit(100)
	code, out, errOut := runBinary(t, env, "watch", first)
	require.Equal(t, 0, code, "%s %s", out, errOut)

	require.Equal(t, 2, closeConnections(t, "warren server (relay) "+names.Prefix)+
		closeConnections(t, "warren server (aggregator) "+names.Prefix))
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(server.out.String(), "broker connection restored") {
		require.True(t, time.Now().Before(deadline), "the server did not reconnect:\n%s", server.out)
		time.Sleep(50 * time.Millisecond)
	}
	waitReady(t, "http://"+addr, server)

	second := submit(100)
	code, out, errOut = runBinary(t, env, "watch", second)
	require.Equal(t, 0, code, "%s %s\nserver:\n%s", out, errOut, server.out)
	resp, err := http.Get("http://" + addr + "/v1/jobs/" + second + "/result")
	require.NoError(t, err)
	defer resp.Body.Close()
	var sum int
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&sum))
	require.Equal(t, 5050, sum)

	require.Equal(t, 0, w.stop(t), "worker:\n%s", w.out)
	require.Equal(t, 0, server.stop(t), "server:\n%s", server.out)
}

// `warren worker --health-listen` answers /healthz, and /readyz once the
// worker is connected to the broker.
func TestWorkerHealthEndpoints(t *testing.T) {
	t.Parallel()
	names, _ := amqptest.Topology(t, nil)
	health := freeAddr(t)
	env := []string{"WARREN_AMQP_URL=" + amqptest.URL(), "WARREN_PREFIX=" + names.Prefix}
	w := start(t, env, "worker", "--types", "echo", "--health-listen", health)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + health + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				require.JSONEq(t, `{"status":"ready"}`, string(body))
				break
			}
		}
		require.True(t, time.Now().Before(deadline), "worker never ready: %v\n%s", err, w.out)
		time.Sleep(20 * time.Millisecond)
	}
	resp, err := http.Get("http://" + health + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, 0, w.stop(t), "worker:\n%s", w.out)
}

// `warren worker --metrics-listen` serves the worker's Prometheus metrics:
// a job with a task that completes, one that fails for good and one that
// is retried once moves the task counters by outcome and the handler
// histogram.
func TestWorkerMetricsEndpoint(t *testing.T) {
	t.Parallel()
	names, _ := amqptest.Topology(t, &broker.TopologyOptions{RetryTiers: []time.Duration{50 * time.Millisecond}})
	addr, metrics := freeAddr(t), freeAddr(t)
	env := []string{
		"WARREN_AMQP_URL=" + amqptest.URL(),
		"WARREN_DATABASE_URL=sqlite://" + filepath.Join(t.TempDir(), "warren.db"),
		"WARREN_PREFIX=" + names.Prefix,
		"WARREN_LISTEN=" + addr,
		"WARREN_RETRY_TIERS=50ms",
		"WARREN_METRICS_LISTEN=" + metrics,
	}
	server := start(t, env, "server")
	w := start(t, env, "worker", "--types", "flaky", "--name", "metrics-e2e")
	waitReady(t, "http://"+addr, server)

	spec := `{"type":"flaky","max_retries":2,"tolerated_failures":1,"tasks":[{"value":1},{"permanent":true},{"value":3,"fail_times":1}]}`
	specFile := filepath.Join(t.TempDir(), "job.json")
	require.NoError(t, os.WriteFile(specFile, []byte(spec), 0o644))
	code, out, errOut := runBinary(t, env, "submit", specFile)
	require.Equal(t, 0, code, errOut)
	code, out, _ = runBinary(t, env, "watch", strings.TrimSpace(out))
	require.Equal(t, 0, code, "%s", out)

	// The worker reports a task after its ack, which may come a moment
	// after the job closed: the scrape is polled (another process, no
	// signal to wait on).
	scrape := func() string {
		resp, err := http.Get("http://" + metrics + "/metrics")
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		return string(body)
	}
	text := scrape()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(text, `warren_worker_tasks_in_flight 0`) ||
		!strings.Contains(text, `warren_worker_tasks_total{outcome="completed",type="flaky"} 2`); text = scrape() {
		require.True(t, time.Now().Before(deadline), "metrics:\n%s", text)
		time.Sleep(20 * time.Millisecond)
	}
	for _, line := range []string{
		`warren_worker_tasks_total{outcome="completed",type="flaky"} 2`,
		`warren_worker_tasks_total{outcome="dead_lettered",type="flaky"} 1`,
		`warren_worker_tasks_total{outcome="retried",type="flaky"} 1`,
		`warren_worker_handler_duration_seconds_count{type="flaky"} 4`,
		`warren_worker_tasks_in_flight 0`,
		`warren_worker_connected 1`,
		`warren_worker_reconnects_total 0`,
		`go_goroutines `,
		`process_resident_memory_bytes `,
	} {
		require.Contains(t, text, line)
	}
	resp, err := http.Get("http://" + metrics + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	// The server lists the worker from its heartbeats (its first may go
	// out before the server listens: the next comes 5 s later).
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/v1/workers")
		require.NoError(t, err)
		var list struct {
			Workers []struct {
				Name  string   `json:"name"`
				Types []string `json:"types"`
				Alive bool     `json:"alive"`
			} `json:"workers"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
		resp.Body.Close()
		if len(list.Workers) == 1 {
			require.Equal(t, "metrics-e2e", list.Workers[0].Name)
			require.Equal(t, []string{"flaky"}, list.Workers[0].Types)
			require.True(t, list.Workers[0].Alive)
			break
		}
		require.True(t, time.Now().Before(deadline), "the worker is not listed:\n%s", server.out)
	}

	require.Equal(t, 0, w.stop(t), "worker:\n%s", w.out)
	require.Equal(t, 0, server.stop(t), "server:\n%s", server.out)
}
