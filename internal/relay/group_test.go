package relay

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/broker"
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
	}, groupIDs(group(tasks, DefaultMaxMessageBytes)))
	require.Empty(t, group(nil, DefaultMaxMessageBytes))
}

func sized(job string, id int64, batch, payload int) store.OutboxTask {
	t := outboxTask(job, id, 0, batch)
	t.Payload = make(json.RawMessage, payload)
	return t
}

// The estimate of a batch's body (payloads plus overheads) stays within
// maxBytes; a task too large to share a message gets one of its own.
func TestGroupCutsByBytes(t *testing.T) {
	t.Parallel()
	const max = 1000
	tasks := []store.OutboxTask{
		sized("a", 1, 10, 300), sized("a", 2, 10, 300), sized("a", 3, 10, 300), // 3 x (300 + 48) + 32 + 1 = 1077: two fit
		sized("a", 4, 10, 2000), // alone
		sized("a", 5, 10, 100), sized("a", 6, 10, 100),
	}
	require.Equal(t, [][]string{{"a:1", "a:2"}, {"a:3"}, {"a:4"}, {"a:5", "a:6"}}, groupIDs(group(tasks, max)))
}

// What RabbitMQ says when it refuses a message over its max_message_size
// (3.10, default limit) becomes the task's error.
func TestRefusalErrorNamesTheSize(t *testing.T) {
	t.Parallel()
	refused := fmt.Errorf("%w: 01J:1: %w", broker.ErrRefused, &amqp.Error{Code: amqp.PreconditionFailed, Server: true,
		Reason: "PRECONDITION_FAILED - message size 134217729 is larger than configured max size 134217728"})
	require.Equal(t, "task message too large for the broker (134217729 bytes): PRECONDITION_FAILED - message size 134217729 is larger than configured max size 134217728",
		refusalError(134217729, refused))
	other := fmt.Errorf("%w: %w", broker.ErrRefused, &amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - something else"})
	require.Equal(t, "task message refused by the broker (10 bytes): PRECONDITION_FAILED - something else", refusalError(10, other))
}

// A message carries one generation: tasks of one job at different
// generations (some redriven or requeued, some not) never share one.
func TestGroupKeepsGenerationsApart(t *testing.T) {
	t.Parallel()
	at := func(id int64, generation int) store.OutboxTask {
		task := outboxTask("a", id, 1, 4)
		task.Generation = generation
		return task
	}
	tasks := []store.OutboxTask{at(1, 2), at(2, 2), at(3, 1), at(4, 2), at(5, 2)}
	require.Equal(t, [][]string{{"a:1", "a:2"}, {"a:3"}, {"a:4", "a:5"}}, groupIDs(group(tasks, DefaultMaxMessageBytes)))
}

// A message carries one task timeout. The tasks of one job share theirs,
// so this only guards the rule: tasks with different limits never share
// a message.
func TestGroupKeepsTaskTimeoutsApart(t *testing.T) {
	t.Parallel()
	with := func(id int64, timeout time.Duration) store.OutboxTask {
		task := outboxTask("a", id, 0, 4)
		task.TaskTimeout = timeout
		return task
	}
	tasks := []store.OutboxTask{with(1, time.Minute), with(2, time.Minute), with(3, time.Hour), with(4, time.Hour)}
	require.Equal(t, [][]string{{"a:1", "a:2"}, {"a:3", "a:4"}}, groupIDs(group(tasks, DefaultMaxMessageBytes)))
}

// The messages in flight are counted as the relay sends them: runs of a
// job's tasks of at most its batch size, by work queue.
func TestQueueMessagesCountsMessagesNotTasks(t *testing.T) {
	t.Parallel()
	var tasks []store.OutboxTask
	for i := range 10 {
		tasks = append(tasks, store.OutboxTask{JobID: "a", TaskID: int64(i + 1), BatchSize: 4})
	}
	for i := range 3 {
		tasks = append(tasks, store.OutboxTask{JobID: "b", TaskID: int64(i + 1), BatchSize: 1, Queue: "gpu"})
	}
	tasks = append(tasks, store.OutboxTask{JobID: "c", TaskID: 1, BatchSize: 64})
	require.Equal(t, map[string]int{"default": 3 + 1, "gpu": 3}, queueMessages(group(tasks, DefaultMaxMessageBytes)))

	// Every cut group makes counts: a retried task does not share its
	// batch-mates' message.
	retried := []store.OutboxTask{{JobID: "d", TaskID: 1, BatchSize: 4}, {JobID: "d", TaskID: 2, BatchSize: 4, Attempts: 1}}
	require.Equal(t, map[string]int{"default": 2}, queueMessages(group(retried, DefaultMaxMessageBytes)))
}

// hold keeps back the short last group of a job whose share the round
// cut, unless it is the job's only group; a job offered every task it had
// sends its short remainder.
func TestHoldKeepsBackOnlyTheShortLastBatchOfACutShare(t *testing.T) {
	t.Parallel()
	cut := func(job string, id int64, batch int) store.OutboxTask {
		t := outboxTask(job, id, 0, batch)
		t.More = true
		return t
	}
	tasks := []store.OutboxTask{
		cut("a", 1, 2), cut("a", 2, 2), cut("a", 3, 2), // cut short: a:3 waits
		outboxTask("b", 1, 0, 2), outboxTask("b", 2, 0, 2), outboxTask("b", 3, 0, 2), // b's remainder goes
		cut("c", 1, 2),                 // c's only group goes
		cut("d", 1, 1), cut("d", 2, 1), // whole batches go
	}
	require.Equal(t, [][]string{
		{"a:1", "a:2"}, {"b:1", "b:2"}, {"b:3"}, {"c:1"}, {"d:1"}, {"d:2"},
	}, groupIDs(hold(group(tasks, DefaultMaxMessageBytes))))
}
