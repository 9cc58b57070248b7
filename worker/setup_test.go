package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/worker"
)

// taskType is the handler name most tests register.
const taskType = "square"

// waitTimeout bounds every wait for a signal; a test that hits it fails.
const waitTimeout = 15 * time.Second

// fastTiers are the retry tiers of most tests: retries come back at once,
// as far as a test can tell.
var fastTiers = []time.Duration{10 * time.Millisecond, 20 * time.Millisecond}

// testBundle is one test's own topology, an admin connection to inspect
// it, and a confirming publisher to send tasks.
type testBundle struct {
	names protocol.Names
	tiers []time.Duration
	admin *amqp.Connection
	pub   *broker.Publisher

	// taken are the results of the result message result took last that
	// it has not returned yet, and took that message.
	taken []protocol.Result
	took  amqp.Delivery
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	return setupTiers(t, fastTiers)
}

// setupTiers is setup with the given retry tiers, for the topology and
// the workers alike, so that the test's cleanup deletes every tier queue.
func setupTiers(t *testing.T, tiers []time.Duration) *testBundle {
	t.Helper()
	names, admin := amqptest.Topology(t, &broker.TopologyOptions{RetryTiers: tiers})
	pub, err := broker.NewPublisher(amqptest.Dial(t), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	return &testBundle{names: names, tiers: tiers, admin: admin, pub: pub}
}

// config returns a worker configuration for the bundle's topology; cfg's
// non-zero fields are kept, except RetryTiers, which are the bundle's.
func (b *testBundle) config(cfg worker.Config) worker.Config {
	if cfg.AMQPURL == "" {
		cfg.AMQPURL = amqptest.URL()
	}
	cfg.Prefix = b.names.Prefix
	cfg.RetryTiers = b.tiers
	if cfg.Name == "" {
		cfg.Name = "test-worker"
	}
	cfg.Logger = testLogger()
	return cfg
}

func testLogger() *slog.Logger {
	if os.Getenv("WARREN_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// runningWorker is a worker whose Run runs in the background.
type runningWorker struct {
	events  chan worker.Event
	control chan controlConsumer
	cancel  context.CancelFunc
	done    chan struct{} // closed when Run has returned err
	err     error
	// up is closed at EventConnected.
	up        chan struct{}
	connected sync.Once
}

// start runs a worker with cfg and handlers; the test's end stops it.
// Its events are forwarded to the returned worker's events channel after
// cfg.OnEvent, if set, has seen them.
func (b *testBundle) start(t *testing.T, cfg worker.Config, handlers map[string]worker.HandlerFunc) *runningWorker {
	t.Helper()
	return b.startWith(t, cfg, handlers, nil)
}

// startWith is start with prepare, if not nil, called on the worker
// before Run, to set test hooks.
func (b *testBundle) startWith(t *testing.T, cfg worker.Config, handlers map[string]worker.HandlerFunc, prepare func(*worker.Worker)) *runningWorker {
	t.Helper()
	rw := &runningWorker{
		events:  make(chan worker.Event, 1000),
		control: make(chan controlConsumer, 10),
		done:    make(chan struct{}),
		up:      make(chan struct{}),
	}
	cfg = b.config(cfg)
	inner := cfg.OnEvent
	cfg.OnEvent = func(ev worker.Event) {
		if inner != nil {
			inner(ev)
		}
		if ev.Kind == worker.EventConnected {
			rw.connected.Do(func() { close(rw.up) })
			return // tests that expect task events do not see it
		}
		if ev.Kind == worker.EventStarted || ev.Kind == worker.EventDone {
			return // nor the in-flight bookkeeping (see TestInFlightEvents)
		}
		rw.events <- ev
	}
	w, err := worker.New(cfg)
	require.NoError(t, err)
	for typ, h := range handlers {
		w.Handle(typ, h)
	}
	worker.OnControlConsumer(w, func(queue string, ch *amqp.Channel) {
		rw.control <- controlConsumer{queue, ch}
	})
	if prepare != nil {
		prepare(w)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rw.cancel = cancel
	go func() {
		defer close(rw.done)
		rw.err = w.Run(ctx)
	}()
	t.Cleanup(func() { _ = rw.stop() })
	return rw
}

// controlConsumer is a worker's control queue and its channel.
type controlConsumer struct {
	queue string
	ch    *amqp.Channel
}

// listening waits until the worker consumes its control queue, and
// returns it: from then on it hears cancels.
func (rw *runningWorker) listening(t *testing.T) controlConsumer {
	t.Helper()
	return recv(t, rw.control, "control consumer")
}

// stop cancels Run's context and returns Run's error.
func (rw *runningWorker) stop() error {
	rw.cancel()
	select {
	case <-rw.done:
		return rw.err
	case <-time.After(waitTimeout):
		return errors.New("Run did not return after its context was cancelled")
	}
}

// returned waits for Run to return by itself and returns its error.
func (rw *runningWorker) returned(t *testing.T) error {
	t.Helper()
	select {
	case <-rw.done:
		return rw.err
	case <-time.After(waitTimeout):
		t.Fatalf("Run did not return within %v", waitTimeout)
		return nil
	}
}

// expect reads the worker's next events and requires their kinds.
func (rw *runningWorker) expect(t *testing.T, kinds ...worker.EventKind) []worker.Event {
	t.Helper()
	evs := make([]worker.Event, 0, len(kinds))
	for i, kind := range kinds {
		select {
		case ev := <-rw.events:
			require.Equal(t, kind, ev.Kind, "event %d of %v: %+v", i, kinds, ev)
			evs = append(evs, ev)
		case <-time.After(waitTimeout):
			t.Fatalf("no %q event (event %d of %v) within %v", kind, i, kinds, waitTimeout)
		}
	}
	return evs
}

// publishTask publishes a task message like the relay does, with the
// given headers, and waits for its confirm.
func (b *testBundle) publishTask(t *testing.T, typ, jobID string, taskID int64, payload string, headers amqp.Table) {
	t.Helper()
	body, err := protocol.EncodeTask(protocol.Task{JobID: jobID, TaskID: taskID, Payload: json.RawMessage(payload)})
	require.NoError(t, err)
	b.publish(t, amqp.Publishing{
		ContentType:   protocol.ContentType,
		DeliveryMode:  amqp.Persistent,
		MessageId:     protocol.MessageID(jobID, taskID),
		CorrelationId: jobID,
		Type:          typ,
		Headers:       headers,
		Body:          body,
	})
}

func (b *testBundle) publish(t *testing.T, msg amqp.Publishing) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	require.NoError(t, b.pub.PublishAndWait(ctx, b.names.JobsExchange, protocol.RoutingKeyTask, msg))
}

// get takes the next message from queue, which must have one: the tests
// call it after the worker reported the confirmed publish that put it there.
func (b *testBundle) get(t *testing.T, queue string) amqp.Delivery {
	t.Helper()
	ch, err := b.admin.Channel()
	require.NoError(t, err)
	defer func() { _ = ch.Close() }()
	d, ok, err := ch.Get(queue, true)
	require.NoError(t, err)
	require.True(t, ok, "queue %q is empty", queue)
	return d
}

// result returns the next result of the results queue, and the message
// that carried it: a single result, or the next one of a result batch
// (the worker sends the results of single task messages that finish
// together in one).
func (b *testBundle) result(t *testing.T) (protocol.Result, amqp.Delivery) {
	t.Helper()
	if len(b.taken) == 0 {
		b.took = b.get(t, b.names.ResultsQueue)
		rs, err := protocol.DecodeResults(b.took.Body)
		require.NoError(t, err)
		b.taken = rs
	}
	r := b.taken[0]
	b.taken = b.taken[1:]
	return r, b.took
}

// results takes every result left in the results queue.
func (b *testBundle) results(t *testing.T) []protocol.Result {
	t.Helper()
	rs := b.taken
	b.taken = nil
	for b.depth(t, b.names.ResultsQueue) > 0 {
		r, _ := b.result(t)
		rs = append(rs, r)
		rs = append(rs, b.taken...)
		b.taken = nil
	}
	return rs
}

func (b *testBundle) depth(t *testing.T, queue string) int {
	t.Helper()
	return amqptest.QueueDepth(t, b.admin, queue)
}

// retries is the relay's headers for a task on its first run.
func retries(maxRetries int) amqp.Table {
	return amqp.Table{protocol.HeaderRetry: int64(0), protocol.HeaderMaxRetries: int64(maxRetries)}
}

// recv waits for one value on c.
func recv[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("no %s within %v", what, waitTimeout)
		panic("unreachable")
	}
}
