package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/broker/amqptest"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/sqlite"
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

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

// The real binaries: one server and two workers close a 500-task job with
// the result in task order, and all stop cleanly on SIGTERM.
func TestServerAndWorkersCloseAJob(t *testing.T) {
	t.Parallel()
	names, _ := amqptest.Topology(t, nil)
	db := filepath.Join(t.TempDir(), "warren.db")
	env := []string{
		"WARREN_AMQP_URL=" + amqptest.URL(),
		"WARREN_DATABASE_URL=sqlite://" + db,
		"WARREN_PREFIX=" + names.Prefix,
	}
	ctx := context.Background()
	st, err := sqlite.Open(ctx, db)
	require.NoError(t, err)
	defer st.Close()

	server := start(t, env, "server")
	w1 := start(t, env, "worker", "--concurrency", "4")
	w2 := start(t, env, "worker", "--types", "echo", "--concurrency", "4")

	const n = 500
	tasks := func(yield func(json.RawMessage, error) bool) {
		for i := 1; i <= n; i++ {
			if !yield(json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), nil) {
				return
			}
		}
	}
	job, _, err := st.CreateJob(ctx, store.NewJob{Type: "echo", Policy: warren.Policy{Reduce: "collect", MaxRetries: 3}}, tasks)
	require.NoError(t, err)

	// Another process closes the job: poll the shared store.
	deadline := time.Now().Add(90 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		got, err := st.GetJob(ctx, job.ID)
		require.NoError(t, err)
		if got.State.Terminal() {
			require.Equal(t, warren.JobCompleted, got.State, "server output:\n%s", server.out)
			require.Equal(t, int64(n), got.CompletedTasks)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job not closed: %+v\nserver:\n%s\nworker 1:\n%s", got, server.out, w1.out)
		}
		<-tick.C
	}
	raw, err := st.JobResult(ctx, job.ID)
	require.NoError(t, err)
	var result []struct{ I int }
	require.NoError(t, json.Unmarshal(raw, &result))
	require.Len(t, result, n)
	for i, r := range result {
		require.Equal(t, i+1, r.I)
	}

	require.Equal(t, 0, w1.stop(t), "worker 1:\n%s", w1.out)
	require.Equal(t, 0, w2.stop(t), "worker 2:\n%s", w2.out)
	require.Equal(t, 0, server.stop(t), "server:\n%s", server.out)
}
