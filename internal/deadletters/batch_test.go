package deadletters_test

import (
	"context"
	"encoding/json"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/deadletters"
	"github.com/warrenhq/warren/protocol"
)

// A batch the broker dead-lettered whole lists as one message naming all
// its tasks, and replays as single task messages of the tasks the store
// reopens.
func TestBatchDeadLetterListsAndReplaysPerTask(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	job := b.failedJob(t, 4, 1, 2, 4) // task 3 is still running
	body, err := protocol.EncodeBatch(protocol.Batch{JobID: job, Tasks: []protocol.BatchTask{
		{TaskID: 1, Payload: json.RawMessage(`{"i":1}`)}, {TaskID: 2, Payload: json.RawMessage(`{"i":2}`)},
		{TaskID: 3, Payload: json.RawMessage(`{"i":3}`)}, {TaskID: 4, Payload: json.RawMessage(`{"i":4}`)},
	}})
	require.NoError(t, err)
	msg := amqp.Publishing{
		ContentType: protocol.ContentType, DeliveryMode: amqp.Persistent, Type: "echo", CorrelationId: job,
		MessageId: protocol.BatchMessageID(job, 1, 4), Body: body,
		Headers: amqp.Table{protocol.HeaderRetry: int64(0), protocol.HeaderMaxRetries: int64(3),
			"x-death": []any{amqp.Table{"queue": b.names.TasksQueue, "reason": "delivery_limit", "count": int64(1), "time": b.at(1)}}},
	}
	b.deadLetter(t, msg)
	msgs := b.list(t, deadletters.Filter{JobID: job})
	require.Len(t, msgs, 1)
	require.Equal(t, int64(1), msgs[0].TaskID)
	require.Equal(t, []int64{1, 2, 3, 4}, msgs[0].TaskIDs)
	require.Equal(t, protocol.ReasonDeliveryLimit, msgs[0].Reason)

	rep, err := b.queue.Replay(context.Background(), deadletters.Filter{JobID: job})
	require.NoError(t, err)
	require.Equal(t, deadletters.Report{Replayed: 1}, rep)
	require.Empty(t, b.list(t, deadletters.Filter{JobID: job}), "the batch's dead letter is gone")
	for _, id := range []int64{1, 2, 4} {
		require.Equal(t, warren.TaskQueued, b.taskState(t, job, id))
	}

	var got []int64
	for _, d := range b.getAll(t, b.names.TasksQueue) {
		task, err := protocol.DecodeTask(d.Body)
		require.NoError(t, err, "replayed as single task messages")
		require.Equal(t, protocol.MessageID(job, task.TaskID), d.MessageId)
		require.EqualValues(t, 0, d.Headers[protocol.HeaderRetry])
		require.EqualValues(t, 2, d.Headers[protocol.HeaderGeneration], "the generation the store reopened it at")
		require.NotContains(t, d.Headers, "x-death")
		got = append(got, task.TaskID)
	}
	require.ElementsMatch(t, []int64{1, 2, 4}, got, "task 3 is not failed: it is not replayed")
}
