package warren_test

// End-to-end tests of the core pipeline against the real RabbitMQ and the
// real stores: store -> relay -> broker -> workers -> aggregator -> store.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/internal/deadletters"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/server"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/postgres"
	"github.com/warrenhq/warren/store/postgres/pgtest"
	"github.com/warrenhq/warren/store/sqlite"
	"github.com/warrenhq/warren/worker"
)

const waitTimeout = 60 * time.Second

// testBundle is one isolated installation: its own topology prefix and its
// own database (file or schema).
type testBundle struct {
	names  protocol.Names
	admin  *amqp.Connection
	store  store.Store
	dbURL  string
	closed chan closedJob
	// applied, duplicates and late add up the aggregators' batch reports.
	applied, duplicates, late atomic.Int64
	batches                   chan store.ApplyReport
	invalid, closes           atomic.Int64
	published                 atomic.Int64
	servers                   []*server.Server
	topo                      *broker.TopologyOptions
	// aggBatch and aggLinger, when set, are the aggregators' BatchSize
	// and Linger.
	aggBatch  int
	aggLinger time.Duration
	// reconcileInterval and reconcileGrace, when set, are the servers'
	// ReconcileInterval and ReconcileGrace.
	reconcileInterval, reconcileGrace time.Duration
	// relayWindow, when set, is the servers' RelayWindow.
	relayWindow int
	// relayPoll, when set, is the servers' RelayPollInterval (20 ms when
	// not).
	relayPoll time.Duration
	// maxJobTasks, when set, is the servers' MaxJobTasks.
	maxJobTasks int64
	// closeScanInterval, when set, is the servers' CloseScanInterval
	// (200 ms when not).
	closeScanInterval time.Duration
	// passes, requeued and lost add up the reconcilers' passes and what
	// they did.
	passes, requeued, lost atomic.Int64
	// signal is pinged after every aggregator event; waitFor re-checks
	// its condition then.
	signal chan struct{}
	// tracerProvider, when set, is the servers' TracerProvider.
	tracerProvider trace.TracerProvider
	// configure, when set, makes last changes to each server's Config.
	configure func(*server.Config)
}

type closedJob struct {
	id    string
	state warren.JobState
}

func openStore(t *testing.T, kind string) (store.Store, string) {
	t.Helper()
	ctx := context.Background()
	switch kind {
	case "sqlite":
		path := filepath.Join(t.TempDir(), "warren.db")
		s, err := sqlite.Open(ctx, path)
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s, "sqlite://" + path
	case "postgres":
		u := pgtest.URL(t)
		s, err := postgres.Open(ctx, u)
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s, u
	}
	t.Fatalf("unknown store %q", kind)
	return nil, ""
}

func setup(t *testing.T, kind string) *testBundle {
	t.Helper()
	return setupWith(t, kind, nil)
}

func setupWith(t *testing.T, kind string, opts *broker.TopologyOptions) *testBundle {
	t.Helper()
	names, admin := amqptest.Topology(t, opts)
	s, u := openStore(t, kind)
	return &testBundle{
		names: names, admin: admin, store: s, dbURL: u, topo: opts,
		closed:  make(chan closedJob, 16),
		batches: make(chan store.ApplyReport, 10000),
		signal:  make(chan struct{}, 1),
	}
}

// startServer runs a warren server (the one `warren server` runs) on st
// until the test ends.
func (b *testBundle) startServer(t *testing.T, st store.Store) *server.Server {
	t.Helper()
	scan := b.closeScanInterval
	if scan == 0 {
		scan = 200 * time.Millisecond
	}
	poll := b.relayPoll
	if poll == 0 {
		poll = 20 * time.Millisecond
	}
	cfg := server.Config{
		AMQPURL: amqptest.URL(), Store: st, Prefix: b.names.Prefix, Listen: "127.0.0.1:0",
		RelayPollInterval: poll, CloseScanInterval: scan,
		AggregatorBatchSize: b.aggBatch, AggregatorLinger: b.aggLinger,
		ReconcileInterval: b.reconcileInterval, ReconcileGrace: b.reconcileGrace, RelayWindow: b.relayWindow,
		TracerProvider: b.tracerProvider, MaxJobTasks: b.maxJobTasks,
		Hooks: server.Hooks{
			OnPublished: func(n int) { b.published.Add(int64(n)); b.ping() },
			OnBatch: func(_ int, rep store.ApplyReport) {
				b.applied.Add(int64(rep.Applied))
				b.duplicates.Add(int64(rep.Duplicates))
				b.late.Add(int64(rep.Closed))
				select {
				case b.batches <- rep:
				default:
				}
				b.ping()
			},
			OnInvalid: func(string, string) { b.invalid.Add(1); b.ping() },
			OnJobClosed: func(id string, state warren.JobState) {
				b.closes.Add(1)
				b.closed <- closedJob{id, state}
			},
			OnReconciled: func(rep store.ReconcileReport) {
				b.passes.Add(1)
				b.requeued.Add(int64(rep.Requeued))
				b.lost.Add(int64(rep.Failed))
				b.ping()
			},
		},
	}
	if b.topo != nil {
		cfg.RetryTiers, cfg.DeliveryLimit = b.topo.RetryTiers, b.topo.DeliveryLimit
	}
	if b.configure != nil {
		b.configure(&cfg)
	}
	srv, err := server.New(cfg)
	require.NoError(t, err)
	require.NoError(t, srv.Start(context.Background()))
	b.servers = append(b.servers, srv)
	t.Cleanup(func() { require.NoError(t, srv.Stop()) })
	return srv
}

// submit creates a job of n "double" tasks whose payloads are {"n": i}.
func (b *testBundle) submit(t *testing.T, n int, policy warren.Policy) warren.Job {
	t.Helper()
	return b.submitTyped(t, "double", n, policy)
}

// submitTyped creates a job of n tasks of type typ whose payloads are
// {"n": i}, and wakes the relays.
func (b *testBundle) submitTyped(t *testing.T, typ string, n int, policy warren.Policy) warren.Job {
	t.Helper()
	if policy.Reduce == "" {
		policy.Reduce = "collect"
	}
	tasks := func(yield func(json.RawMessage, error) bool) {
		for i := 1; i <= n; i++ {
			if !yield(json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), nil) {
				return
			}
		}
	}
	job, created, err := b.store.CreateJob(context.Background(), store.NewJob{Type: typ, Policy: policy}, tasks)
	require.NoError(t, err)
	require.True(t, created)
	b.wakeRelays()
	return job
}

// workerConfig is a worker configuration that matches the bundle's
// topology.
func (b *testBundle) workerConfig(concurrency int) worker.Config {
	cfg := worker.Config{AMQPURL: amqptest.URL(), Prefix: b.names.Prefix, Concurrency: concurrency}
	if b.topo != nil {
		cfg.RetryTiers, cfg.DeliveryLimit = b.topo.RetryTiers, b.topo.DeliveryLimit
	}
	return cfg
}

// wakeRelays makes the servers' relays look at the outbox now.
func (b *testBundle) wakeRelays() {
	for _, s := range b.servers {
		s.WakeRelay()
	}
}

// dlq returns the dead-letter operations of the bundle's installation.
func (b *testBundle) dlq(t *testing.T) *deadletters.Queue {
	t.Helper()
	pub, err := broker.NewPublisher(b.admin, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	q, err := deadletters.New(deadletters.Config{Conn: b.admin, Publisher: pub, Names: b.names, Store: b.store})
	require.NoError(t, err)
	return q
}

// amqpMsg is a persistent task message of type typ with a raw body.
func amqpMsg(typ, body string) amqp.Publishing {
	return amqp.Publishing{DeliveryMode: amqp.Persistent, ContentType: protocol.ContentType, Type: typ,
		MessageId: fmt.Sprintf("raw-%d", rand.Int64()), Body: []byte(body)}
}

func (b *testBundle) waitClosed(t *testing.T, id string) warren.JobState {
	t.Helper()
	timeout := time.After(waitTimeout)
	for {
		select {
		case c := <-b.closed:
			if c.id == id {
				return c.state
			}
		case <-timeout:
			job, _ := b.store.GetJob(context.Background(), id)
			t.Fatalf("job %s did not close in %s: %+v", id, waitTimeout, job)
		}
	}
}

// expectDoubled checks a closed job of n tasks: exact counters and the
// collected result 2, 4, ..., 2n in task order.
func (b *testBundle) expectDoubled(t *testing.T, id string, n int) {
	t.Helper()
	ctx := context.Background()
	job, err := b.store.GetJob(ctx, id)
	require.NoError(t, err)
	require.Equal(t, warren.JobCompleted, job.State)
	require.Equal(t, int64(n), job.ExpectedTasks)
	require.Equal(t, int64(n), job.CompletedTasks)
	require.Equal(t, int64(0), job.FailedTasks)
	raw, err := b.store.JobResult(ctx, id)
	require.NoError(t, err)
	var got []int
	require.NoError(t, json.Unmarshal(raw, &got))
	require.Len(t, got, n)
	for i, v := range got {
		require.Equal(t, 2*(i+1), v, "result element %d", i)
	}
}

// plainTask is what a client with no warren code reads from a task.
type plainTask struct {
	JobID   string `json:"job_id"`
	TaskID  int64  `json:"task_id"`
	Payload struct {
		N int `json:"n"`
	} `json:"payload"`
}

// takeTasks consumes n task messages with plain amqp091-go, without
// acking them, and returns them with their channel.
func takeTasks(t *testing.T, conn *amqp.Connection, queue string, n int) (*amqp.Channel, []amqp.Delivery) {
	t.Helper()
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Qos(n, 0, false))
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	require.NoError(t, err)
	out := make([]amqp.Delivery, 0, n)
	timeout := time.After(waitTimeout)
	for len(out) < n {
		select {
		case d := <-deliveries:
			out = append(out, d)
		case <-timeout:
			t.Fatalf("got %d of %d tasks", len(out), n)
		}
	}
	return ch, out
}

// publishPlainResults publishes three-field results with plain amqp091-go
// and waits for their confirms.
func publishPlainResults(t *testing.T, conn *amqp.Connection, exchange string, results []plainTask, value func(plainTask) int) {
	t.Helper()
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	require.NoError(t, ch.Confirm(false))
	ctx := context.Background()
	confs := make([]*amqp.DeferredConfirmation, 0, len(results))
	for _, r := range results {
		body, err := json.Marshal(map[string]any{"job_id": r.JobID, "task_id": r.TaskID, "result": value(r)})
		require.NoError(t, err)
		c, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, "result", true, false, amqp.Publishing{
			ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body,
		})
		require.NoError(t, err)
		confs = append(confs, c)
	}
	for _, c := range confs {
		ok, err := c.WaitContext(ctx)
		require.NoError(t, err)
		require.True(t, ok)
	}
}

func decodePlain(t *testing.T, ds []amqp.Delivery) []plainTask {
	t.Helper()
	out := make([]plainTask, len(ds))
	for i, d := range ds {
		require.NoError(t, json.Unmarshal(d.Body, &out[i]))
	}
	return out
}

func doubled(p plainTask) int { return 2 * p.Payload.N }

func forEachStore(t *testing.T, f func(t *testing.T, kind string)) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f(t, kind)
		})
	}
}

// plainClient is a worker with no warren code: it holds n task deliveries
// unacknowledged and publishes results for them with plain amqp091-go.
type plainClient struct {
	conn  *amqp.Connection
	ch    *amqp.Channel
	ds    []amqp.Delivery
	tasks []plainTask
	b     *testBundle
}

func (b *testBundle) takePlain(t *testing.T, n int) *plainClient {
	t.Helper()
	conn := amqptest.Dial(t)
	ch, ds := takeTasks(t, conn, b.names.Prefix+"tasks.q", n)
	return &plainClient{conn: conn, ch: ch, ds: ds, tasks: decodePlain(t, ds), b: b}
}

func (p *plainClient) publish(t *testing.T, results []plainTask, value func(plainTask) int) {
	t.Helper()
	publishPlainResults(t, p.conn, p.b.names.Prefix+"results.x", results, value)
}

func (p *plainClient) ackAll(t *testing.T) {
	t.Helper()
	require.NoError(t, p.ch.Ack(p.ds[len(p.ds)-1].DeliveryTag, true))
}

// A plain AMQP client, with no warren code, publishing three-field results
// in shuffled order closes a 1,000-task job with exact counters and the
// result in task order.
func TestShuffledPlainResultsCloseAJobInTaskOrder(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		b := setup(t, kind)
		b.startServer(t, b.store)
		const n = 1000
		job := b.submit(t, n, warren.Policy{})

		pc := b.takePlain(t, n)
		tasks := pc.tasks
		rand.Shuffle(len(tasks), func(i, j int) { tasks[i], tasks[j] = tasks[j], tasks[i] })
		pc.publish(t, tasks, doubled)
		pc.ackAll(t)

		require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID))
		b.expectDoubled(t, job.ID, n)
	})
}

// Every result delivered twice and some three times: the counters stay
// exact and every extra copy is absorbed as a duplicate.
func TestDuplicateResultsAreAbsorbed(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		b := setup(t, kind)
		b.startServer(t, b.store)
		const n = 500
		job := b.submit(t, n, warren.Policy{})

		pc := b.takePlain(t, n)
		var copies []plainTask
		for i, tk := range pc.tasks {
			copies = append(copies, tk, tk)
			if i%10 == 0 {
				copies = append(copies, tk)
			}
		}
		rand.Shuffle(len(copies), func(i, j int) { copies[i], copies[j] = copies[j], copies[i] })
		pc.publish(t, copies, doubled)
		pc.ackAll(t)

		require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID))
		b.expectDoubled(t, job.ID, n)
		// Copies that arrive after the close are counted as late, not as
		// duplicates; together they are every extra copy.
		b.waitFor(t, func() bool { return b.duplicates.Load()+b.late.Load() == int64(len(copies)-n) },
			"all %d extra copies absorbed", len(copies)-n)
		require.Equal(t, int64(n), b.applied.Load())
	})
}

// Results that arrive after the job closed change nothing.
func TestLateResultsChangeNothing(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		b := setup(t, kind)
		b.startServer(t, b.store)
		const n = 100
		job := b.submit(t, n, warren.Policy{})

		pc := b.takePlain(t, n)
		pc.publish(t, pc.tasks, doubled)
		pc.ackAll(t)
		require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID))
		before, err := b.store.JobResult(context.Background(), job.ID)
		require.NoError(t, err)

		// Different values, arriving late: all no-ops.
		pc.publish(t, pc.tasks, func(plainTask) int { return -1 })
		b.waitFor(t, func() bool { return b.late.Load()+b.duplicates.Load() == n }, "%d late results absorbed", n)
		b.expectDoubled(t, job.ID, n)
		after, err := b.store.JobResult(context.Background(), job.ID)
		require.NoError(t, err)
		require.Equal(t, before, after)
	})
}

// A consumer that dies holding tasks it never acked: the broker redelivers
// them to a real worker and the job completes exactly.
func TestTasksOfAStoppedWorkerAreRedelivered(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		b := setup(t, kind)
		b.startServer(t, b.store)
		const n, held = 200, 50
		job := b.submit(t, n, warren.Policy{})

		// The "crashed" worker: takes 50 tasks, never acks, loses its
		// connection.
		crashed, err := broker.Dial(context.Background(), amqptest.URL(), "crashing worker")
		require.NoError(t, err)
		_, ds := takeTasks(t, crashed, b.names.TasksQueue, held)
		require.Len(t, ds, held)
		require.NoError(t, crashed.Close())

		var runs, redelivered atomic.Int64
		heldIDs := map[int64]bool{}
		for _, tk := range decodePlain(t, ds) {
			heldIDs[tk.TaskID] = true
		}
		w := newDoublingWorker(t, b, func(tk worker.Task) {
			runs.Add(1)
			if heldIDs[tk.TaskID] {
				redelivered.Add(1)
			}
		})
		runWorker(t, w)

		require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID))
		b.expectDoubled(t, job.ID, n)
		require.GreaterOrEqual(t, runs.Load(), int64(n))
		require.GreaterOrEqual(t, redelivered.Load(), int64(held))
	})
}

// The whole pipeline with two real workers, on both stores.
func TestJobRunsEndToEndWithWorkers(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		b := setup(t, kind)
		b.startServer(t, b.store)
		const n = 1000
		job := b.submit(t, n, warren.Policy{})
		runWorker(t, newDoublingWorker(t, b, nil))
		runWorker(t, newDoublingWorker(t, b, nil))
		require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID))
		b.expectDoubled(t, job.ID, n)
		tasks, _, err := b.store.ListTasks(context.Background(), job.ID, store.ListTasksOpts{Limit: 5})
		require.NoError(t, err)
		for _, tk := range tasks {
			require.Equal(t, warren.TaskCompleted, tk.State)
			require.Equal(t, 1, tk.Attempts)
			require.NotEmpty(t, tk.Worker)
			require.NotNil(t, tk.QueuedAt)
			require.NotNil(t, tk.StartedAt)
			require.NotNil(t, tk.FinishedAt)
		}
	})
}

// Two servers (relay + aggregator each) on one PostgreSQL database: each
// task is published once per claim, and exactly one aggregator closes the
// job.
func TestTwoServersOnPostgresCloseAJobOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, "postgres")
	second, err := postgres.Open(context.Background(), b.dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = second.Close() })
	a1 := b.startServer(t, b.store)
	a2 := b.startServer(t, second)

	const n = 2000
	job := b.submit(t, n, warren.Policy{})
	runWorker(t, newDoublingWorker(t, b, nil))
	require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID))
	b.expectDoubled(t, job.ID, n)
	require.Equal(t, int64(n), b.applied.Load())

	// Both aggregators trying to close it again, at once: nothing closes.
	var wg sync.WaitGroup
	for _, a := range []*server.Server{a1, a2, a1, a2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			require.NoError(t, a.CloseJob(context.Background(), job.ID))
		}()
	}
	wg.Wait()
	require.Equal(t, int64(1), b.closes.Load())
}

// A job closes failed when a task fails permanently beyond the tolerance,
// and completed with null in its place when tolerated.
func TestFailedTasksAndTolerance(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")
	b.startServer(t, b.store)
	strict := b.submit(t, 10, warren.Policy{})
	tolerant := b.submit(t, 10, warren.Policy{ToleratedFailures: 1, ToleratedFailurePercent: 10})
	w, err := worker.New(b.workerConfig(4))
	require.NoError(t, err)
	w.Handle("double", func(_ context.Context, tk worker.Task) (any, error) {
		var p struct{ N int }
		if err := json.Unmarshal(tk.Payload, &p); err != nil {
			return nil, worker.Permanent(err)
		}
		if p.N == 3 {
			return nil, worker.Permanent(fmt.Errorf("three is not allowed"))
		}
		return 2 * p.N, nil
	})
	runWorker(t, w)

	states := map[string]warren.JobState{}
	for len(states) < 2 {
		select {
		case c := <-b.closed:
			states[c.id] = c.state
		case <-time.After(waitTimeout):
			t.Fatalf("jobs did not close: %v", states)
		}
	}
	require.Equal(t, warren.JobFailed, states[strict.ID])
	require.Equal(t, warren.JobCompleted, states[tolerant.ID])

	ctx := context.Background()
	_, err = b.store.JobResult(ctx, strict.ID)
	require.ErrorIs(t, err, warren.ErrNotFound)
	raw, err := b.store.JobResult(ctx, tolerant.ID)
	require.NoError(t, err)
	require.JSONEq(t, `[2,4,null,8,10,12,14,16,18,20]`, string(raw))
	errs, err := b.store.JobErrors(ctx, strict.ID, 10)
	require.NoError(t, err)
	require.Len(t, errs, 1)
	require.Equal(t, int64(3), errs[0].TaskID)
	require.Contains(t, errs[0].Error, "three is not allowed")
}

// Malformed results and results for unknown jobs are dead-lettered to the
// results dead-letter queue, not dropped and not redelivered forever.
func TestInvalidResultsAreDeadLettered(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")
	b.startServer(t, b.store)
	conn := amqptest.Dial(t)
	publishPlainResults(t, conn, b.names.ResultsExchange, []plainTask{{JobID: "no-such-job", TaskID: 1}}, doubled)
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	require.NoError(t, ch.PublishWithContext(context.Background(), b.names.ResultsExchange, protocol.RoutingKeyResult, true, false,
		amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(`not json`)}))
	b.waitFor(t, func() bool { return b.invalid.Load() == 2 }, "2 invalid results")
	// The broker dead-letters them asynchronously: read them from the
	// results dead-letter queue.
	_, parked := takeTasks(t, conn, b.names.ResultsDLQ, 2)
	bodies := []string{string(parked[0].Body), string(parked[1].Body)}
	require.Contains(t, bodies, "not json")
	require.Contains(t, bodies[0]+bodies[1], "no-such-job")
}

func newDoublingWorker(t *testing.T, b *testBundle, seen func(worker.Task)) *worker.Worker {
	t.Helper()
	w, err := worker.New(b.workerConfig(8))
	require.NoError(t, err)
	w.Handle("double", func(_ context.Context, tk worker.Task) (any, error) {
		if seen != nil {
			seen(tk)
		}
		var p struct{ N int }
		if err := json.Unmarshal(tk.Payload, &p); err != nil {
			return nil, worker.Permanent(err)
		}
		return 2 * p.N, nil
	})
	return w
}

func runWorker(t *testing.T, w *worker.Worker) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := w.Run(ctx)
		if ctx.Err() == nil {
			t.Errorf("worker stopped before the test ended: %v", err)
		}
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

func (b *testBundle) ping() {
	select {
	case b.signal <- struct{}{}:
	default:
	}
}

// waitFor re-checks cond after every aggregator or relay event until it
// holds or the wait times out.
func (b *testBundle) waitFor(t *testing.T, cond func() bool, format string, args ...any) {
	t.Helper()
	timeout := time.After(waitTimeout)
	for !cond() {
		select {
		case <-b.signal:
		case <-timeout:
			t.Fatalf("timed out waiting for: "+format, args...)
		}
	}
}

// A task that never gets acked (its worker keeps crashing) reaches the
// quorum queue's delivery limit; the broker dead-letters it and the
// aggregator marks it failed with that reason.
func TestDeliveryLimitFailsAPoisonTask(t *testing.T) {
	t.Parallel()
	b := setupWith(t, "sqlite", &broker.TopologyOptions{DeliveryLimit: 2})
	b.startServer(t, b.store)
	job := b.submit(t, 1, warren.Policy{})

	// The "crashing worker": every delivery is returned unacknowledged.
	conn := amqptest.Dial(t)
	ch, err := conn.Channel()
	require.NoError(t, err)
	deliveries, err := ch.Consume(b.names.TasksQueue, "", false, false, false, false, nil)
	require.NoError(t, err)
	go func() {
		for d := range deliveries {
			_ = d.Nack(false, true)
		}
	}()

	require.Equal(t, warren.JobFailed, b.waitClosed(t, job.ID))
	errs, err := b.store.JobErrors(context.Background(), job.ID, 10)
	require.NoError(t, err)
	require.Len(t, errs, 1)
	require.Contains(t, errs[0].Error, "delivery_limit")
	// The people's copy is parked in tasks.dlq too.
	_, parked := takeTasks(t, conn, b.names.TasksDLQ, 1)
	require.Equal(t, protocol.MessageID(job.ID, 1), parked[0].MessageId)
}

// An aggregator that crashed after recording the last result but before
// closing the job: the next aggregator finds the job at start and closes it.
func TestAggregatorClosesJobsLeftHalfClosed(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		b := setup(t, kind)
		ctx := context.Background()
		const n = 5
		job := b.submit(t, n, warren.Policy{})
		_, err := b.store.RelayBatch(ctx, n, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
			refs := make([]store.TaskRef, len(tasks))
			for i, tk := range tasks {
				refs[i] = tk.Ref()
			}
			return refs, nil
		})
		require.NoError(t, err)
		outcomes := make([]store.Outcome, n)
		for i := range outcomes {
			outcomes[i] = store.Outcome{JobID: job.ID, TaskID: int64(i + 1), State: warren.TaskCompleted,
				Result: json.RawMessage(fmt.Sprint(2 * (i + 1))), Attempts: 1}
		}
		rep, err := b.store.ApplyOutcomes(ctx, outcomes)
		require.NoError(t, err)
		require.Equal(t, []string{job.ID}, rep.ReadyToClose)
		// ...and the process died here. A new server starts:
		b.startServer(t, b.store)
		require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID))
		b.expectDoubled(t, job.ID, n)
	})
}

// A task that keeps failing transiently is retried max_retries times, then
// dead-lettered by the worker; the aggregator marks it failed with the
// reason, the error and its attempts.
func TestRetriesExhaustedFailsTheTask(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")
	b.startServer(t, b.store)
	job := b.submit(t, 3, warren.Policy{MaxRetries: 1, ToleratedFailures: 1, ToleratedFailurePercent: 50})
	var runs atomic.Int64
	w, err := worker.New(b.workerConfig(2))
	require.NoError(t, err)
	w.Handle("double", func(_ context.Context, tk worker.Task) (any, error) {
		if tk.TaskID == 2 {
			runs.Add(1)
			return nil, fmt.Errorf("disk full on attempt %d", tk.Attempt)
		}
		return 2 * tk.TaskID, nil
	})
	runWorker(t, w)

	require.Equal(t, warren.JobCompleted, b.waitClosed(t, job.ID))
	require.Equal(t, int64(2), runs.Load(), "1 run + 1 retry")
	ctx := context.Background()
	raw, err := b.store.JobResult(ctx, job.ID)
	require.NoError(t, err)
	require.JSONEq(t, `[2,null,6]`, string(raw))
	tasks, _, err := b.store.ListTasks(ctx, job.ID, store.ListTasksOpts{State: warren.TaskFailed})
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	require.Equal(t, 2, tasks[0].Attempts)
	require.Contains(t, tasks[0].Error, protocol.ReasonRetriesExhausted)
	require.Contains(t, tasks[0].Error, "disk full on attempt 2")
	require.NotEmpty(t, tasks[0].Worker)
}
