package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/worker"
)

// A worker consumes the queues it is given, declaring them; a task it
// retries comes back to the queue it came from, through that queue's own
// retry tiers, even when its message does not say which queue it is for.
func TestRunConsumesItsQueuesAndRetriesIntoThem(t *testing.T) {
	t.Parallel()
	b := setup(t)
	t.Cleanup(func() {
		for _, q := range []string{"gpu", "io"} {
			require.NoError(t, broker.DeleteWorkQueue(b.admin, b.names, q, b.tiers...))
		}
	})
	runs := make(chan worker.Task, 10)
	rw := b.start(t, worker.Config{Name: "w-queues", Queues: []string{"gpu", "io"}}, map[string]worker.HandlerFunc{
		taskType: func(_ context.Context, tk worker.Task) (any, error) {
			runs <- tk
			if tk.Attempt == 1 {
				return nil, errors.New("flaky")
			}
			return "ok", nil
		},
	})
	<-rw.up
	for _, q := range []string{"gpu", "io"} {
		body, err := protocol.EncodeTask(protocol.Task{JobID: "job-" + q, TaskID: 1, Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
		// No x-queue header: the worker knows where the task came from.
		ctx := context.Background()
		require.NoError(t, b.pub.PublishAndWait(ctx, b.names.JobsExchange, protocol.TaskRoutingKey(q), amqp.Publishing{
			ContentType: protocol.ContentType, DeliveryMode: amqp.Persistent, Type: taskType,
			MessageId: protocol.MessageID("job-"+q, 1), Headers: retries(3), Body: body}))
	}
	rw.expect(t, worker.EventRetried, worker.EventRetried, worker.EventCompleted, worker.EventCompleted)
	attempts := map[string][]int{}
	for range 4 {
		tk := recv(t, runs, "a run")
		attempts[tk.JobID] = append(attempts[tk.JobID], tk.Attempt)
	}
	require.Equal(t, map[string][]int{"job-gpu": {1, 2}, "job-io": {1, 2}}, attempts)
	require.NoError(t, rw.stop())
	require.Zero(t, b.depth(t, b.names.TasksQueue), "nothing went to the default queue")
	for _, q := range []string{"gpu", "io"} {
		require.Zero(t, b.depth(t, b.names.WorkQueue(q)))
	}
}

func TestConfigRefusesABadQueueName(t *testing.T) {
	t.Parallel()
	_, err := worker.New(worker.Config{Queues: []string{"gpu", "Bad.Name"}})
	require.ErrorContains(t, err, `worker: Config.Queues: a queue name may hold only lowercase letters, digits, '-' and '_', got "Bad.Name"`)
}
