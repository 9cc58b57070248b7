package worker_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/worker"
)

// closeConnections has the broker close the worker's connections named
// by which ("consumer", "publisher"), the way an operator or a failing
// node would. It needs rabbitmqctl for the test broker.
func closeConnections(t *testing.T, workerName string, which ...string) {
	t.Helper()
	if _, err := exec.LookPath("rabbitmqctl"); err != nil {
		t.Fatal("rabbitmqctl (installed with rabbitmq-server) is required to close connections from the broker side")
	}
	// Each line is a pid, a tab, and the client properties as an Erlang
	// term; close_connection takes the pid in this form.
	out, err := exec.Command("rabbitmqctl", "-s", "list_connections", "pid", "client_properties").Output()
	require.NoError(t, err, "rabbitmqctl list_connections")
	pids := map[string]string{} // by connection name
	for _, line := range strings.Split(string(out), "\n") {
		pid, props, ok := strings.Cut(line, "\t")
		if !ok {
			continue
		}
		for _, w := range which {
			name := fmt.Sprintf("warren worker %s (%s)", workerName, w)
			if strings.Contains(props, fmt.Sprintf(`{"connection_name","%s"}`, name)) {
				pids[name] = pid
			}
		}
	}
	for _, w := range which {
		name := fmt.Sprintf("warren worker %s (%s)", workerName, w)
		pid, ok := pids[name]
		require.True(t, ok, "no connection named %q", name)
		out, err := exec.Command("rabbitmqctl", "-q", "close_connection", pid, "test").CombinedOutput()
		require.NoError(t, err, "rabbitmqctl close_connection %s: %s", pid, out)
	}
}

// The broker closes both of the worker's connections while a task runs:
// the worker reconnects and keeps working; every task published after
// the close completes exactly once, and the task that was running
// completes at least once, nothing lost.
func TestRunReconnectsAfterTheBrokerClosesItsConnections(t *testing.T) {
	t.Parallel()
	b := setup(t)
	name := "w-" + b.names.Prefix // unique: the test finds its connections by it
	const inFlight, n = 1, 20     // task 1 runs during the close; 2..n+1 come after
	started := make(chan struct{}, 1)
	var firstRun atomic.Bool
	firstRun.Store(true)
	rw := b.start(t, worker.Config{Name: name, Concurrency: 4}, map[string]worker.HandlerFunc{
		taskType: func(ctx context.Context, task worker.Task) (any, error) {
			if task.TaskID == inFlight && firstRun.CompareAndSwap(true, false) {
				started <- struct{}{}
				<-ctx.Done() // held until the connection is lost
				return nil, ctx.Err()
			}
			return square(ctx, task)
		},
	})
	rw.listening(t)
	b.publishTask(t, taskType, "job-r", inFlight, `{"x": 1}`, nil)
	recv(t, started, "the in-flight task")

	closeConnections(t, name, "consumer", "publisher")
	lost := rw.expect(t, worker.EventConnectionLost, worker.EventReconnected)[0]
	require.ErrorIs(t, lost.Err, worker.ErrConnectionLost)
	require.ErrorContains(t, lost.Err, "CONNECTION_FORCED")

	for i := int64(2); i <= n+1; i++ {
		b.publishTask(t, taskType, "job-r", i, fmt.Sprintf(`{"x": %d}`, i), nil)
	}
	completed := map[int64]int{}
	for len(completed) < n+1 {
		ev := recv(t, rw.events, "completed event")
		require.Equal(t, worker.EventCompleted, ev.Kind, "%+v", ev)
		completed[ev.TaskID]++
	}
	require.NoError(t, rw.stop())

	results := map[int64]int{}
	for _, r := range b.results(t) {
		require.JSONEq(t, fmt.Sprintf(`{"square": %d}`, r.TaskID*r.TaskID), string(r.Result))
		results[r.TaskID]++
	}
	require.GreaterOrEqual(t, results[inFlight], 1, "the in-flight task completed")
	delete(results, inFlight)
	want := map[int64]int{}
	for i := int64(2); i <= n+1; i++ {
		want[i] = 1
	}
	require.Equal(t, want, results, "one result per task published after the close")
	require.Zero(t, b.depth(t, b.names.TasksQueue))
	require.Zero(t, b.depth(t, b.names.TasksDLQ))
}

// Losing only the publisher connection is a loss too: the consumer
// connection is closed with it, and both come back.
func TestRunReconnectsAfterLosingThePublisherConnection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	name := "w-" + b.names.Prefix
	rw := b.start(t, worker.Config{Name: name}, map[string]worker.HandlerFunc{taskType: square})
	first := rw.listening(t)

	closeConnections(t, name, "publisher")
	rw.expect(t, worker.EventConnectionLost, worker.EventReconnected)
	require.True(t, first.ch.IsClosed(), "the consumer connection was closed too")
	rw.listening(t)
	b.publishTask(t, taskType, "job-p", 1, `{"x": 3}`, nil)
	rw.expect(t, worker.EventCompleted)
	r, _ := b.result(t)
	require.JSONEq(t, `{"square": 9}`, string(r.Result))
}

// Cancelling Run's context while it waits to reconnect returns nil at
// once, not after the backoff.
func TestRunReturnsNilWhenStoppedWhileReconnecting(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	var attempts []int
	rw := b.startWith(t, worker.Config{}, map[string]worker.HandlerFunc{taskType: square}, func(w *worker.Worker) {
		worker.SetReconnectBackoff(w, func(n int) time.Duration {
			mu.Lock()
			defer mu.Unlock()
			attempts = append(attempts, n)
			return time.Hour
		})
	})
	c := rw.listening(t)
	require.NoError(t, c.ch.Close())
	rw.expect(t, worker.EventConnectionLost)
	require.NoError(t, rw.stop(), "Run returned within %v although the backoff is an hour", waitTimeout)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{1}, attempts, "it was waiting for its first reconnect")
}

// A topology the worker cannot declare on reconnect (the work queue now
// exists with other arguments) is an error Run returns, not a loop.
func TestRunReturnsTheErrorOfATopologyItCannotRedeclare(t *testing.T) {
	t.Parallel()
	b := setup(t)
	redeclared := make(chan struct{})
	rw := b.startWith(t, worker.Config{}, map[string]worker.HandlerFunc{taskType: square}, func(w *worker.Worker) {
		worker.SetReconnectBackoff(w, func(int) time.Duration {
			<-redeclared
			return 0
		})
	})
	b.publishTask(t, taskType, "job-q", 1, `{"x": 1}`, nil)
	rw.expect(t, worker.EventCompleted) // it is consuming
	ch, err := b.admin.Channel()
	require.NoError(t, err)
	defer func() { _ = ch.Close() }()
	_, err = ch.QueueDelete(b.names.TasksQueue, false, false, false)
	require.NoError(t, err)
	rw.expect(t, worker.EventConnectionLost)
	_, err = ch.QueueDeclare(b.names.TasksQueue, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeClassic})
	require.NoError(t, err)
	close(redeclared)

	err = rw.returned(t)
	var ae *amqp.Error
	require.True(t, errors.As(err, &ae), "%v", err)
	require.Equal(t, amqp.PreconditionFailed, ae.Code, "%v", err)
	require.ErrorContains(t, err, b.names.TasksQueue)
}

func TestRunReportsConnected(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rw := b.start(t, worker.Config{}, map[string]worker.HandlerFunc{
		taskType: func(context.Context, worker.Task) (any, error) { return nil, nil },
	})
	recv(t, rw.up, "connected")
}
