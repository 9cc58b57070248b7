package warren_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/server"
	"github.com/warrenhq/warren/worker"
)

// queueExists reports whether queue exists, on a channel of its own.
func queueExists(t *testing.T, conn *amqp.Connection, queue string) bool {
	t.Helper()
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer func() { _ = ch.Close() }()
	_, err = ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if broker.IsNotFound(err) {
		return false
	}
	require.NoError(t, err)
	return true
}

// runQueueWorker runs a doubling worker on queue q until stop is called.
func runQueueWorker(t *testing.T, b *testBundle, q string) (stop func()) {
	t.Helper()
	cfg := b.workerConfig(4)
	cfg.Queues = []string{q}
	w, err := worker.New(cfg)
	require.NoError(t, err)
	w.Handle("double", func(_ context.Context, tk worker.Task) (any, error) { return 2, nil })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			require.NoError(t, <-done)
		}
	}
	t.Cleanup(stop)
	return stop
}

// A work queue per type whose jobs closed, that holds nothing and that
// no worker consumes is deleted with its retry tiers once idle for
// --queue-idle-delete, and declared again for the next job on it; the
// default queue stays.
func TestIdleWorkQueueIsDeletedAndDeclaredAgain(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")
	t.Cleanup(func() { _ = broker.DeleteWorkQueue(b.admin, b.names, "idle") })
	deleted := make(chan string, 4)
	b.configure = func(cfg *server.Config) {
		cfg.QueueIdleDelete, cfg.QueueSweepInterval = 100*time.Millisecond, 20*time.Millisecond
		cfg.Hooks.OnQueueDeleted = func(q string) { deleted <- q }
	}
	b.startServer(t, b.store)
	tier := b.names.QueueRetryQueue("idle", protocol.RetryTierName(protocol.DefaultRetryTiers[0]))

	stop := runQueueWorker(t, b, "idle")
	job := b.submit(t, 5, warren.Policy{Queue: "idle"})
	require.Equal(t, closedJob{job.ID, warren.JobCompleted}, <-b.closed)
	select {
	case q := <-deleted:
		t.Fatalf("queue %q deleted while its worker consumes it", q)
	case <-time.After(300 * time.Millisecond): // three idle times: a wait for nothing to happen
	}
	require.True(t, queueExists(t, b.admin, b.names.WorkQueue("idle")))

	stop()
	select {
	case q := <-deleted:
		require.Equal(t, "idle", q)
	case <-time.After(waitTimeout):
		t.Fatal("the idle queue was not deleted")
	}
	require.False(t, queueExists(t, b.admin, b.names.WorkQueue("idle")))
	require.False(t, queueExists(t, b.admin, tier), "its retry tiers go with it")
	require.True(t, queueExists(t, b.admin, b.names.TasksQueue), "the default queue is never deleted")

	// The next job on it: the relay declares it again before it
	// publishes; a worker started afterwards finds its tasks.
	job = b.submit(t, 5, warren.Policy{Queue: "idle"})
	require.Eventually(t, func() bool { return queueExists(t, b.admin, b.names.WorkQueue("idle")) }, waitTimeout, 10*time.Millisecond)
	runQueueWorker(t, b, "idle")
	require.Equal(t, closedJob{job.ID, warren.JobCompleted}, <-b.closed)
}

// A job whose work queue has no consumer says so, in its "waiting", until
// a worker consumes it.
func TestJobWithoutConsumerSaysSo(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")
	t.Cleanup(func() { _ = broker.DeleteWorkQueue(b.admin, b.names, "nobody") })
	b.configure = func(cfg *server.Config) { cfg.QueueSweepInterval = 20 * time.Millisecond }
	srv := b.startServer(t, b.store)
	job := b.submit(t, 3, warren.Policy{Queue: "nobody"})

	type waiting struct {
		Reason, Queue string
		Since         time.Time
	}
	read := func() *waiting {
		resp, err := http.Get(srv.URL() + "/v1/jobs/" + job.ID)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var body struct{ Waiting *waiting }
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		return body.Waiting
	}
	var w *waiting
	require.Eventually(t, func() bool { w = read(); return w != nil }, waitTimeout, 10*time.Millisecond)
	require.Equal(t, "no_consumer", w.Reason)
	require.Equal(t, "nobody", w.Queue)
	require.WithinDuration(t, time.Now(), w.Since, time.Minute)

	runQueueWorker(t, b, "nobody")
	require.Equal(t, closedJob{job.ID, warren.JobCompleted}, <-b.closed)
	require.Nil(t, read(), "a closed job waits for nothing")
}
