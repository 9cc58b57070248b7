package relay_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/internal/relay"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/sqlite"
)

type testBundle struct {
	names protocol.Names
	conn  *amqp.Connection
	store store.Store
	pub   *broker.Publisher
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	names, conn := amqptest.Topology(t, nil)
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "w.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	pub, err := broker.NewPublisher(conn, &broker.PublisherOptions{Window: 64})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	return &testBundle{names: names, conn: conn, store: s, pub: pub}
}

func (b *testBundle) createJob(t *testing.T, n int) warren.Job {
	t.Helper()
	return b.createJobWith(t, warren.Policy{Reduce: "collect", MaxRetries: 2}, n)
}

// createJobWith creates a job of n echo tasks with policy p.
func (b *testBundle) createJobWith(t *testing.T, p warren.Policy, n int) warren.Job {
	t.Helper()
	tasks := func(yield func(json.RawMessage, error) bool) {
		for i := 1; i <= n; i++ {
			if !yield(json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), nil) {
				return
			}
		}
	}
	job, _, err := b.store.CreateJob(context.Background(),
		store.NewJob{Type: "echo", Policy: p}, tasks)
	require.NoError(t, err)
	return job
}

func TestRelayPublishesEveryTaskOnceAndStartsTheJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 1200
	job := b.createJob(t, n)
	r, err := relay.New(relay.Config{Store: b.store, Publisher: b.pub, Names: b.names, BatchSize: 500})
	require.NoError(t, err)

	ctx := context.Background()
	total := 0
	for {
		k, err := r.RelayOnce(ctx)
		require.NoError(t, err)
		if k == 0 {
			break
		}
		total += k
	}
	require.Equal(t, n, total)
	require.Equal(t, n, amqptest.QueueDepth(t, b.conn, b.names.TasksQueue))
	got, err := b.store.GetJob(ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, warren.JobRunning, got.State)
	require.NotNil(t, got.PublishedAt)

	// The first message carries the wire protocol's properties.
	ch, err := b.conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	d, ok, err := ch.Get(b.names.TasksQueue, false)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, protocol.MessageID(job.ID, 1), d.MessageId)
	require.Equal(t, job.ID, d.CorrelationId)
	require.Equal(t, "echo", d.Type)
	require.Equal(t, protocol.ContentType, d.ContentType)
	require.Equal(t, amqp.Persistent, d.DeliveryMode)
	require.EqualValues(t, 0, d.Headers[protocol.HeaderRetry])
	require.EqualValues(t, 2, d.Headers[protocol.HeaderMaxRetries])
	require.EqualValues(t, 1, d.Headers[protocol.HeaderGeneration], "a new task's generation")
	require.EqualValues(t, warren.DefaultTaskTimeout.Milliseconds(), d.Headers[protocol.HeaderTaskTimeout],
		"a job without task_timeout: the default, in milliseconds")
	task, err := protocol.DecodeTask(d.Body)
	require.NoError(t, err)
	require.Equal(t, protocol.Task{JobID: job.ID, TaskID: 1, Payload: json.RawMessage(`{"i":1}`)}, task)
}

// An unroutable publish (no queue bound) is an error, and the tasks stay
// pending: nothing is marked queued that the broker did not store.
func TestRelayKeepsUnroutableTasksPending(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job := b.createJob(t, 10)
	ch, err := b.conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.QueueUnbind(b.names.TasksQueue, protocol.RoutingKeyTask, b.names.JobsExchange, nil))

	r, err := relay.New(relay.Config{Store: b.store, Publisher: b.pub, Names: b.names})
	require.NoError(t, err)
	n, err := r.RelayOnce(context.Background())
	require.ErrorIs(t, err, broker.ErrUnroutable)
	require.Zero(t, n)
	pending, _, err := b.store.ListTasks(context.Background(), job.ID, store.ListTasksOpts{State: warren.TaskPending})
	require.NoError(t, err)
	require.Len(t, pending, 10)

	// Once routable again, the same tasks go out.
	require.NoError(t, ch.QueueBind(b.names.TasksQueue, protocol.RoutingKeyTask, b.names.JobsExchange, false, nil))
	n, err = r.RelayOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 10, n)
	require.Equal(t, 10, amqptest.QueueDepth(t, b.conn, b.names.TasksQueue))
}

// failingMark publishes through the real store but fails before marking,
// as a relay that crashes between publish and mark would.
type failingMark struct{ store.Store }

var errCrash = errors.New("crashed before marking")

func (f failingMark) RelayRound(ctx context.Context, round store.Round, publish func(context.Context, []store.OutboxTask) ([]store.TaskRef, error)) (int, error) {
	return f.Store.RelayRound(ctx, round, func(ctx context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		if _, err := publish(ctx, tasks); err != nil {
			return nil, err
		}
		return nil, errCrash
	})
}

// A crash between publish and mark causes a duplicate message, never a
// lost task.
func TestRelayCrashBetweenPublishAndMarkDuplicatesNeverLoses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job := b.createJob(t, 20)
	crashing, err := relay.New(relay.Config{Store: failingMark{b.store}, Publisher: b.pub, Names: b.names})
	require.NoError(t, err)
	_, err = crashing.RelayOnce(context.Background())
	require.ErrorIs(t, err, errCrash)

	r, err := relay.New(relay.Config{Store: b.store, Publisher: b.pub, Names: b.names})
	require.NoError(t, err)
	n, err := r.RelayOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 20, n)
	require.Equal(t, 40, amqptest.QueueDepth(t, b.conn, b.names.TasksQueue))
	got, err := b.store.GetJob(context.Background(), job.ID)
	require.NoError(t, err)
	require.Equal(t, warren.JobRunning, got.State)
}

// Run publishes a job created while it idles, woken by Wake, and stops
// when its context ends.
func TestRelayRunPublishesNewJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	published := make(chan int, 100)
	r, err := relay.New(relay.Config{Store: b.store, Publisher: b.pub, Names: b.names,
		PollInterval: time.Hour, OnPublished: func(n int) { published <- n }})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()

	b.createJob(t, 7)
	r.Wake()
	select {
	case n := <-published:
		require.Equal(t, 7, n)
	case <-time.After(30 * time.Second):
		t.Fatal("the relay did not publish the new job")
	}
	cancel()
	require.NoError(t, <-done)
}

func TestRelayConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	_, err := relay.New(relay.Config{})
	require.ErrorContains(t, err, "Config.Store")
}

func TestBacklogCollectorReportsTheOutbox(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createJob(t, 12)
	reg := prometheus.NewRegistry()
	reg.MustRegister(relay.NewBacklogCollector(b.store))
	n, err := testutil.GatherAndCount(reg, "warren_relay_backlog")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	families, err := reg.Gather()
	require.NoError(t, err)
	require.Equal(t, 12.0, families[0].GetMetric()[0].GetGauge().GetValue())
}
