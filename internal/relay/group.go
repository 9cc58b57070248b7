package relay

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/spans"
	"github.com/warrenhq/warren/internal/wire"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/store"
)

// What a message body holds besides its tasks' payloads, at most (the
// JSON of a batch body; a single task's body is smaller): per task,
// {"task_id":N,"payload":} and a comma; per message, the job id and
// {"job_id":"","tasks":[]}.
const (
	taskOverhead    = 48
	messageOverhead = 32
)

// group splits outbox tasks, in the order the store returns them, into
// the groups that go out as one message each: runs of consecutive tasks
// of one job, with the same attempts, generation and task timeout (the
// message carries one of each), of at most the job's batch size and,
// by an estimate of the body from the payloads' lengths, of at most
// maxBytes. A job with batch size 1 gets one group per task, and so does
// a task too large to share a message.
func group(tasks []store.OutboxTask, maxBytes int) [][]store.OutboxTask {
	groups := make([][]store.OutboxTask, 0, len(tasks))
	for i := 0; i < len(tasks); {
		size := batchSize(tasks[i])
		bytes := messageOverhead + len(tasks[i].JobID) + taskOverhead + len(tasks[i].Payload)
		j := i + 1
		for j < len(tasks) && j-i < size && tasks[j].JobID == tasks[i].JobID &&
			tasks[j].Attempts == tasks[i].Attempts && tasks[j].Generation == tasks[i].Generation &&
			tasks[j].TaskTimeout == tasks[i].TaskTimeout &&
			tasks[j].TaskID > tasks[j-1].TaskID {
			bytes += taskOverhead + len(tasks[j].Payload)
			if bytes > maxBytes {
				break
			}
			j++
		}
		groups = append(groups, tasks[i:j:j])
		i = j
	}
	return groups
}

// hold drops from groups (group's) the last group of each job whose
// share the round cut (store.OutboxTask.More) when it is shorter than the
// job's batch size: its tasks stay pending, to go out in a whole batch
// with the tasks after them in a later round. A job's only group in the
// round is never held, so that every job offered tasks gets some out;
// and the last group of a job offered every task it had is its
// remainder, which no later round would make whole.
func hold(groups [][]store.OutboxTask) [][]store.OutboxTask {
	kept := make([][]store.OutboxTask, 0, len(groups))
	for i, g := range groups {
		first := i == 0 || groups[i-1][0].JobID != g[0].JobID
		last := i == len(groups)-1 || groups[i+1][0].JobID != g[0].JobID
		if last && !first && g[0].More && len(g) < batchSize(g[0]) {
			continue
		}
		kept = append(kept, g)
	}
	return kept
}

// batchSize is how many tasks of t's job one message may carry.
func batchSize(t store.OutboxTask) int {
	return min(max(t.BatchSize, 1), protocol.MaxBatchSize)
}

// message is one task message and the tasks it carries.
type message struct {
	tasks []store.OutboxTask
	out   wire.Outbound
	// span is the message's warren.relay.publish span, from its encoding
	// to its confirm (or its failure).
	span trace.Span
}

// size is the length of the message's body: what the broker's
// max_message_size bounds.
func (m message) size() int { return len(m.out.Msg.Body) }

// encode returns the messages of a group: one, unless its body came out
// over MaxMessageBytes (the estimate fell short: JSON escapes "<" in six
// bytes, say), in which case the group is split in halves until each
// part fits or holds a single task. A task that cannot be encoded is
// failed in rd, and its group-mates go without it.
func (r *Relay) encode(g []store.OutboxTask, rd *round) []message {
	out, err := r.message(g)
	switch {
	case err != nil && len(g) == 1:
		rd.fail(r.cfg.Logger, g[0], 0, "task message cannot be encoded: "+err.Error())
		return nil
	case err == nil && (len(g) == 1 || len(out.Msg.Body) <= r.cfg.MaxMessageBytes):
		return []message{r.traced(message{tasks: g, out: out}, rd)}
	}
	half := len(g) / 2
	return append(r.encode(g[:half], rd), r.encode(g[half:], rd)...)
}

// message returns the task message of a group: a single task message for
// one task, else a task batch message. The group's tasks share their
// job, type, attempts, retry budget, generation and task timeout.
func (r *Relay) message(g []store.OutboxTask) (wire.Outbound, error) {
	m := wire.TaskMessage{JobID: g[0].JobID, Type: g[0].Type, Retries: g[0].Attempts, MaxRetries: g[0].MaxRetries,
		Generation: g[0].Generation, Timeout: g[0].TaskTimeout, Queue: g[0].Queue, Tasks: make([]protocol.BatchTask, len(g)),
		// Task 0 is the job's reduce task (warren.ReduceTaskID), which
		// the store gives the relay alone, with its own type and queue.
		Reduce: g[0].TaskID == warren.ReduceTaskID, ExpectedTasks: g[0].ExpectedTasks}
	for i, t := range g {
		m.Tasks[i] = protocol.BatchTask{TaskID: t.TaskID, Payload: t.Payload}
	}
	return wire.Tasks(r.cfg.Names, m)
}

// traced starts m's warren.relay.publish span, a child of the span that
// submitted its job (store.OutboxTask.TraceParent), and puts the span's
// trace context in m's headers for the worker to continue. A job
// submitted outside any trace gets a span of its own trace, or, with no
// tracing, a no-op span and no headers. rd ends the span if the message
// is not confirmed.
func (r *Relay) traced(m message, rd *round) message {
	t := m.tasks[0]
	parent := spans.Context{Parent: t.TraceParent, State: t.TraceState}.SpanContext()
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), parent)
	_, m.span = r.tracer.Start(ctx, spans.RelayPublish, trace.WithSpanKind(trace.SpanKindProducer))
	wire.SetTrace(&m.out.Msg, m.span.SpanContext())
	if !m.span.IsRecording() {
		return m
	}
	rd.spans = append(rd.spans, m.span)
	ids := make([]int64, len(m.tasks))
	for i, t := range m.tasks {
		ids[i] = t.TaskID
	}
	m.span.SetAttributes(spans.Tasks(t.JobID, ids)...)
	m.span.SetAttributes(spans.JobType.String(t.Type), spans.Generation.Int(t.Generation), spans.Attempt.Int(t.Attempts+1),
		spans.RabbitMQ, spans.MessagingOperationType.String("send"), spans.MessagingOperationName.String("publish"),
		spans.MessagingDestination.String(m.out.Exchange), spans.MessagingRoutingKey.String(m.out.Key),
		spans.MessagingMessageID.String(m.out.Msg.MessageId), spans.MessagingConversationID.String(t.JobID),
		spans.MessagingBodySize.Int(len(m.out.Msg.Body)))
	return m
}
