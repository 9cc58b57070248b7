package relay_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/internal/relay"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/store"
)

func outboxTask(job string, id int64, attempts, batch int) store.OutboxTask {
	return store.OutboxTask{JobID: job, TaskID: id, Type: "echo", Attempts: attempts, BatchSize: batch}
}

func groupIDs(groups [][]store.OutboxTask) [][]string {
	var out [][]string
	for _, g := range groups {
		var ids []string
		for _, t := range g {
			ids = append(ids, protocol.MessageID(t.JobID, t.TaskID))
		}
		out = append(out, ids)
	}
	return out
}

func TestGroupPacksConsecutiveTasksOfOneJob(t *testing.T) {
	t.Parallel()
	tasks := []store.OutboxTask{
		outboxTask("a", 1, 0, 3), outboxTask("a", 2, 0, 3), outboxTask("a", 3, 0, 3), outboxTask("a", 4, 0, 3),
		outboxTask("a", 7, 0, 3),                           // a gap in ids still packs
		outboxTask("a", 8, 2, 3), outboxTask("a", 9, 2, 3), // other attempts: a new group
		outboxTask("b", 1, 0, 1), outboxTask("b", 2, 0, 1), // batch size 1: one each
		outboxTask("c", 5, 0, 0), // 0 means 1
	}
	require.Equal(t, [][]string{
		{"a:1", "a:2", "a:3"}, {"a:4", "a:7"}, {"a:8", "a:9"}, {"b:1"}, {"b:2"}, {"c:5"},
	}, groupIDs(relay.Group(tasks)))
	require.Empty(t, relay.Group(nil))
}

// A job with a batch size goes out as batch messages of that many tasks
// (the last one shorter), each confirmed and marked like single tasks.
func TestRelaySendsABatchJobAsBatchMessages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	tasks := func(yield func(json.RawMessage, error) bool) {
		for i := 1; i <= 10; i++ {
			if !yield(json.RawMessage(`{"i":`+strconv.Itoa(i)+`}`), nil) {
				return
			}
		}
	}
	job, _, err := b.store.CreateJob(ctx, store.NewJob{Type: "echo", Policy: warren.Policy{MaxRetries: 4, BatchSize: 4}}, tasks)
	require.NoError(t, err)
	r, err := relay.New(relay.Config{Store: b.store, Publisher: b.pub, Names: b.names})
	require.NoError(t, err)
	n, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 10, n, "every task is marked queued")
	require.Equal(t, 3, amqptest.QueueDepth(t, b.conn, b.names.TasksQueue), "4 + 4 + 2 tasks in 3 messages")
	got, err := b.store.GetJob(ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, warren.JobRunning, got.State)

	ch, err := b.conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	var ids []int64
	for range 3 {
		d, ok, err := ch.Get(b.names.TasksQueue, true)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, job.ID, d.CorrelationId)
		require.Equal(t, "echo", d.Type)
		require.Equal(t, amqp.Persistent, d.DeliveryMode)
		require.EqualValues(t, 0, d.Headers[protocol.HeaderRetry])
		require.EqualValues(t, 4, d.Headers[protocol.HeaderMaxRetries])
		ts, batch, err := protocol.DecodeTasks(d.Body)
		require.NoError(t, err)
		require.True(t, batch)
		require.Equal(t, protocol.BatchMessageID(job.ID, ts[0].TaskID, len(ts)), d.MessageId)
		for _, tk := range ts {
			ids = append(ids, tk.TaskID)
		}
	}
	require.ElementsMatch(t, []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, ids)
}
