package worker_test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/worker"
)

// A running worker publishes its heartbeat (name, queues, types,
// concurrency, tasks in flight) every interval, and a goodbye when Run
// returns.
func TestHeartbeatsAndGoodbye(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ch, err := b.admin.Channel()
	require.NoError(t, err)
	t.Cleanup(func() { _ = ch.Close() })
	q, err := ch.QueueDeclare("", false, true, true, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeClassic})
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(q.Name, "", b.names.HeartbeatExchange, false, nil))
	beats, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	require.NoError(t, err)
	uri, err := amqp.ParseURI(amqptest.URL())
	require.NoError(t, err)
	next := func() protocol.Heartbeat {
		t.Helper()
		d := recv(t, beats, "heartbeat")
		require.Equal(t, protocol.ContentType, d.ContentType)
		require.Equal(t, amqp.Transient, d.DeliveryMode)
		require.Equal(t, uri.Username, d.UserId, "user_id is the connection's user, which RabbitMQ validates")
		h, err := protocol.DecodeHeartbeat(d.Body)
		require.NoError(t, err)
		return h
	}

	release := make(chan struct{})
	running := make(chan struct{}, 1)
	rw := b.start(t, worker.Config{Name: "hb-1", Concurrency: 3, HeartbeatInterval: 50 * time.Millisecond},
		map[string]worker.HandlerFunc{
			taskType: func(ctx context.Context, task worker.Task) (any, error) {
				running <- struct{}{}
				<-release
				return square(ctx, task)
			},
			"other": square,
		})
	first := next()
	require.NotEmpty(t, first.ID)
	require.Equal(t, "hb-1", first.Name)
	require.Equal(t, protocol.HeartbeatRunning, first.State)
	require.Equal(t, []string{protocol.DefaultQueue}, first.Queues)
	require.Equal(t, []string{"other", taskType}, first.Types)
	require.Equal(t, 3, first.Concurrency)
	require.Equal(t, 0, first.InFlight)
	require.Equal(t, 50*time.Millisecond, first.Interval())
	require.WithinDuration(t, time.Now(), first.StartedAt, time.Minute)

	b.publishTask(t, taskType, "job-hb", 1, `{"x": 2}`, retries(0))
	recv(t, running, "handler call")
	for h := next(); h.InFlight != 1; h = next() {
		require.Equal(t, first.ID, h.ID, "one id for the whole run")
	}
	close(release)
	rw.expect(t, worker.EventCompleted)
	for h := next(); h.InFlight != 0; h = next() {
	}

	require.NoError(t, rw.stop())
	for {
		h := next()
		require.Equal(t, first.ID, h.ID)
		if h.State == protocol.HeartbeatStopping {
			break
		}
	}
}

// A negative interval turns heartbeats off.
func TestHeartbeatsOff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ch, err := b.admin.Channel()
	require.NoError(t, err)
	t.Cleanup(func() { _ = ch.Close() })
	q, err := ch.QueueDeclare("", false, true, true, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeClassic})
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(q.Name, "", b.names.HeartbeatExchange, false, nil))
	rw := b.start(t, worker.Config{HeartbeatInterval: -1}, map[string]worker.HandlerFunc{taskType: square})
	<-rw.up
	b.publishTask(t, taskType, "job-off", 1, `{"x": 2}`, retries(0))
	rw.expect(t, worker.EventCompleted)
	require.NoError(t, rw.stop())
	n, err := ch.QueueDeclarePassive(q.Name, false, true, true, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeClassic})
	require.NoError(t, err)
	require.Zero(t, n.Messages, "no heartbeat, no goodbye")
}

// Every task that starts is done once, after its outcome: the tasks
// between EventStarted and EventDone are those in flight.
func TestInFlightEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	events := make(chan worker.Event, 100)
	rw := b.start(t, worker.Config{OnEvent: func(ev worker.Event) {
		if ev.Kind == worker.EventStarted || ev.Kind == worker.EventDone || ev.Kind == worker.EventCompleted {
			events <- ev
		}
	}}, map[string]worker.HandlerFunc{taskType: square})
	b.publishTask(t, taskType, "job-if", 1, `{"x": 2}`, retries(0))
	var kinds []worker.EventKind
	for range 3 {
		ev := recv(t, events, "event")
		require.Equal(t, "job-if", ev.JobID)
		kinds = append(kinds, ev.Kind)
	}
	require.Equal(t, []worker.EventKind{worker.EventStarted, worker.EventCompleted, worker.EventDone}, kinds)
	rw.expect(t, worker.EventCompleted)
}
