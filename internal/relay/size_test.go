package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/internal/relay"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/store"
)

// smallBroker makes the test broker behave as if its max_message_size
// were max bytes, without changing the node's setting (which every test
// on the broker shares): a message with a longer body is refused for
// real, the way RabbitMQ refuses one over its limit (it closes the
// channel the message came on with PRECONDITION_FAILED), because it is
// sent with a user id that is not the connection's, which RabbitMQ
// refuses in just that way.
type smallBroker struct {
	*broker.Publisher
	max int
}

func (b smallBroker) refuse(msg amqp.Publishing) amqp.Publishing {
	if len(msg.Body) > b.max {
		msg.UserId = "warren-test-not-the-user"
	}
	return msg
}

func (b smallBroker) Publish(ctx context.Context, exchange, key string, msg amqp.Publishing) (*broker.Confirmation, error) {
	return b.Publisher.Publish(ctx, exchange, key, b.refuse(msg))
}

func (b smallBroker) PublishAlone(ctx context.Context, exchange, key string, msg amqp.Publishing) error {
	return b.Publisher.PublishAlone(ctx, exchange, key, b.refuse(msg))
}

// bigJob creates a job of one task whose payload is a JSON string of n
// bytes, and returns it with the size of its task message's body.
func (b *testBundle) bigJob(t *testing.T, n int) (warren.Job, int) {
	t.Helper()
	payload := json.RawMessage(`"` + strings.Repeat("x", n-2) + `"`)
	job, _, err := b.store.CreateJob(context.Background(), store.NewJob{Type: "echo", Policy: warren.Policy{Reduce: "collect"}},
		func(yield func(json.RawMessage, error) bool) { yield(payload, nil) })
	require.NoError(t, err)
	body, err := protocol.EncodeTask(protocol.Task{JobID: job.ID, TaskID: 1, Payload: payload})
	require.NoError(t, err)
	return job, len(body)
}

// task returns a job's task as the store records it.
func (b *testBundle) task(t *testing.T, jobID string, taskID int64) warren.TaskRecord {
	t.Helper()
	tasks, _, err := b.store.ListTasks(context.Background(), jobID, store.ListTasksOpts{})
	require.NoError(t, err)
	for _, task := range tasks {
		if task.TaskID == taskID {
			return task
		}
	}
	t.Fatalf("job %s has no task %d", jobID, taskID)
	return warren.TaskRecord{}
}

// complete runs every task message in the work queue as a worker and the
// aggregator would, successfully, and returns the jobs that became ready
// to close.
func (b *testBundle) complete(t *testing.T) []string {
	t.Helper()
	ch, err := b.conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	var outcomes []store.Outcome
	for {
		d, ok, err := ch.Get(b.names.TasksQueue, true)
		require.NoError(t, err)
		if !ok {
			break
		}
		tasks, _, err := protocol.DecodeTasks(d.Body)
		require.NoError(t, err)
		for _, task := range tasks {
			outcomes = append(outcomes, store.Outcome{JobID: task.JobID, TaskID: task.TaskID, State: warren.TaskCompleted, Result: task.Payload})
		}
	}
	report, err := b.store.ApplyOutcomes(context.Background(), outcomes)
	require.NoError(t, err)
	return report.ReadyToClose
}

// A task message the broker refuses although it is under the relay's
// MaxMessageBytes (the broker's max_message_size is lower) closes the
// relay's channel, and every message unconfirmed on it fails alike. The
// relay then publishes those alone, which tells the refused one: its task
// is failed after MaxRefusals refusals, and the others are confirmed. The
// relay stops with its channel; the server then starts a new one on a new
// channel, which publishes the rest. Before, every relay started with the
// same oldest task, and its channel closed again.
func TestATaskTheBrokerRefusesDoesNotHoldUpTheJobsBehindIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	big, size := b.bigJob(t, 100<<10)
	small := b.createJob(t, 5)

	pub, queued := b.pub, 0
	for relays := 0; queued < 5; relays++ {
		require.Less(t, relays, 3, "the small job's tasks were not published")
		r, err := relay.New(relay.Config{Store: b.store, Publisher: smallBroker{pub, 64 << 10}, Names: b.names})
		require.NoError(t, err)
		n, err := r.RelayOnce(context.Background())
		if err != nil {
			require.ErrorIs(t, err, broker.ErrClosed)
		}
		queued += n
		select {
		case <-pub.Done(): // as the server does: a new channel, a new relay
			pub, err = broker.NewPublisher(b.conn, nil)
			require.NoError(t, err)
			t.Cleanup(func() { _ = pub.Close() })
		default:
		}
	}
	require.Equal(t, 5, amqptest.QueueDepth(t, b.conn, b.names.TasksQueue))
	task := b.task(t, big.ID, 1)
	require.Equal(t, warren.TaskFailed, task.State)
	require.True(t, strings.HasPrefix(task.Error, fmt.Sprintf("task message refused by the broker (%d bytes): PRECONDITION_FAILED", size)),
		task.Error)
	require.Equal(t, []string{small.ID}, b.complete(t), "the small job completes")
	got, err := b.store.GetJob(context.Background(), big.ID)
	require.NoError(t, err)
	require.Equal(t, int64(1), got.FailedTasks)
	require.True(t, store.ReadyToClose(got), "the big job can close, failed")
}

// recv returns the next value of ch, failing the test if the relay
// stops first or nothing comes within 30 s.
func recv[T any](t *testing.T, ch <-chan T, stopped <-chan error, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case err := <-stopped:
		t.Fatalf("the relay stopped before %s: %v", what, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
	panic("unreachable")
}

// A job whose one task is too big for the broker does not stop a job
// submitted after it from completing. The task's message, over
// MaxMessageBytes, goes out alone, on a channel of its own: the broker
// refuses it MaxRefusals times, and the relay fails the task so that its
// job can close. Everything else goes out on the relay's own channel,
// which stays open, and the relay keeps running. Before, the refusal
// closed the relay's channel, the relay stopped, and the next relay
// started with the same oldest task.
func TestATaskTooBigForTheBrokerDoesNotStopTheNextJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const limit = 64 << 10
	big, size := b.bigJob(t, 100<<10)
	small := b.createJob(t, 5)
	published, failed, ready := make(chan int, 10), make(chan int, 10), make(chan string, 10)
	r, err := relay.New(relay.Config{Store: b.store, Publisher: smallBroker{b.pub, limit}, Names: b.names,
		MaxMessageBytes: limit, PollInterval: time.Hour,
		OnPublished: func(n int) { published <- n }, OnFailed: func(n int) { failed <- n },
		OnReadyToClose: func(id string) { ready <- id }})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-stopped:
		case <-time.After(30 * time.Second):
			t.Error("the relay did not stop")
		}
	})

	require.Equal(t, 5, recv(t, published, stopped, "the small job's tasks are published"))
	require.Equal(t, 1, recv(t, failed, stopped, "the big task is failed"))
	require.Equal(t, big.ID, recv(t, ready, stopped, "the big job is ready to close"))
	task := b.task(t, big.ID, 1)
	require.Equal(t, warren.TaskFailed, task.State)
	require.True(t, strings.HasPrefix(task.Error, fmt.Sprintf("task message refused by the broker (%d bytes): PRECONDITION_FAILED", size)),
		task.Error)
	require.Equal(t, []string{small.ID}, b.complete(t), "the small job completes")
	select {
	case <-b.pub.Done():
		t.Fatal("the relay's own channel closed")
	default:
	}

	b.createJob(t, 3)
	r.Wake()
	require.Equal(t, 3, recv(t, published, stopped, "a job submitted afterwards is published"))
}

// A job's batches are cut by bytes as well as by count: no message body
// is over MaxMessageBytes unless it carries a single task, which then
// goes out alone (the broker takes it here). The cut follows the
// payloads' lengths, and a batch that comes out over the limit all the
// same (JSON writes "<" as \u003c) is split.
func TestRelayCutsBatchesByBytes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const limit = 32 << 10
	payload := func(i int) json.RawMessage {
		if i == 7 {
			return json.RawMessage(`"` + strings.Repeat("<", 6000) + `"`)
		}
		return json.RawMessage(fmt.Sprintf(`{"i":%d,"pad":%q}`, i, strings.Repeat("x", 10<<10)))
	}
	job, _, err := b.store.CreateJob(context.Background(), store.NewJob{Type: "echo", Policy: warren.Policy{BatchSize: 8}},
		func(yield func(json.RawMessage, error) bool) {
			for i := 1; i <= 9; i++ {
				if !yield(payload(i), nil) {
					return
				}
			}
		})
	require.NoError(t, err)
	r, err := relay.New(relay.Config{Store: b.store, Publisher: b.pub, Names: b.names, MaxMessageBytes: limit})
	require.NoError(t, err)
	n, err := r.RelayOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 9, n)

	ch, err := b.conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	var batches [][]int64
	for {
		d, ok, err := ch.Get(b.names.TasksQueue, true)
		require.NoError(t, err)
		if !ok {
			break
		}
		tasks, _, err := protocol.DecodeTasks(d.Body)
		require.NoError(t, err)
		var ids []int64
		for _, task := range tasks {
			require.JSONEq(t, string(payload(int(task.TaskID))), string(task.Payload))
			ids = append(ids, task.TaskID)
		}
		if len(tasks) > 1 {
			require.LessOrEqual(t, len(d.Body), limit, "message %s", d.MessageId)
		}
		batches = append(batches, ids)
	}
	require.ElementsMatch(t, [][]int64{{1, 2, 3}, {4, 5, 6}, {7}, {8, 9}}, batches, "job %s", job.ID)
}

// A task whose message cannot be encoded (the store holds a payload that
// is not JSON) is failed at once: no retry can change that. Its
// batch-mates go out without it. Before, the whole batch was skipped at
// every round and its job never closed.
func TestATaskThatCannotBeEncodedIsFailed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job, _, err := b.store.CreateJob(context.Background(), store.NewJob{Type: "echo", Policy: warren.Policy{BatchSize: 3}},
		func(yield func(json.RawMessage, error) bool) {
			for _, p := range []string{`{"i":1}`, `{"i":`, `{"i":3}`} {
				if !yield(json.RawMessage(p), nil) {
					return
				}
			}
		})
	require.NoError(t, err)
	r, err := relay.New(relay.Config{Store: b.store, Publisher: b.pub, Names: b.names})
	require.NoError(t, err)
	n, err := r.RelayOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, 2, amqptest.QueueDepth(t, b.conn, b.names.TasksQueue))
	task := b.task(t, job.ID, 2)
	require.Equal(t, warren.TaskFailed, task.State)
	require.True(t, strings.HasPrefix(task.Error, "task message cannot be encoded: "), task.Error)
	n, err = r.RelayOnce(context.Background())
	require.NoError(t, err)
	require.Zero(t, n, "nothing is left in the outbox")
}
