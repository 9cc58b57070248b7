package deadletters_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/internal/deadletters"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/postgres"
	"github.com/warrenhq/warren/store/postgres/pgtest"
	"github.com/warrenhq/warren/store/sqlite"
)

type testBundle struct {
	names protocol.Names
	conn  *amqp.Connection
	store store.Store
	pub   *broker.Publisher
	queue *deadletters.Queue
	// t0 is a whole second in the past that dead-letter times count from.
	t0 time.Time
}

// options change what setup builds.
type options struct {
	// wrap, when set, is what the Queue sees instead of the store.
	wrap func(store.Store) store.Store
	// postgres runs the test on a PostgreSQL store (a schema of its own)
	// instead of SQLite.
	postgres bool
}

func setup(t *testing.T, opts *options) *testBundle {
	t.Helper()
	names, conn := amqptest.Topology(t, nil)
	s := openStore(t, opts != nil && opts.postgres)
	pub, err := broker.NewPublisher(conn, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	var queueStore store.Store = s
	if opts != nil && opts.wrap != nil {
		queueStore = opts.wrap(s)
	}
	q, err := deadletters.New(deadletters.Config{Conn: conn, Publisher: pub, Names: names, Store: queueStore, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	return &testBundle{names: names, conn: conn, store: s, pub: pub, queue: q,
		t0: time.Now().UTC().Add(-time.Hour).Truncate(time.Second)}
}

// openStore opens a fresh store, PostgreSQL or SQLite, closed when the
// test ends.
func openStore(t *testing.T, postgresStore bool) store.Store {
	t.Helper()
	var (
		s   store.Store
		err error
	)
	if postgresStore {
		s, err = postgres.Open(context.Background(), pgtest.URL(t))
	} else {
		s, err = sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "w.db"))
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// eachStore runs test as parallel subtests on SQLite and PostgreSQL.
func eachStore(t *testing.T, test func(t *testing.T, opts *options)) {
	t.Helper()
	for name, pg := range map[string]bool{"sqlite": false, "postgres": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, &options{postgres: pg})
		})
	}
}

// at returns the dead-letter time sec seconds after t0.
func (b *testBundle) at(sec int) time.Time { return b.t0.Add(time.Duration(sec) * time.Second) }

// failedJob creates a job of n tasks, publishes them all as the relay
// would, and records the tasks in failed as failed, as the aggregator
// would. The other tasks stay queued.
func (b *testBundle) failedJob(t *testing.T, n int, failed ...int64) string {
	t.Helper()
	ctx := context.Background()
	job, _, err := b.store.CreateJob(ctx, store.NewJob{Type: "echo", Policy: warren.Policy{Reduce: "collect", MaxRetries: 3}}, payloads(n))
	require.NoError(t, err)
	_, err = b.store.RelayBatch(ctx, 1000, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		refs := make([]store.TaskRef, len(tasks))
		for i, task := range tasks {
			refs[i] = task.Ref()
		}
		return refs, nil
	})
	require.NoError(t, err)
	var outcomes []store.Outcome
	for _, id := range failed {
		outcomes = append(outcomes, store.Outcome{JobID: job.ID, TaskID: id, State: warren.TaskFailed,
			Error: "retries_exhausted: boom", Attempts: 4, Worker: "w1"})
	}
	report, err := b.store.ApplyOutcomes(ctx, outcomes)
	require.NoError(t, err)
	require.Equal(t, len(failed), report.AppliedFailed)
	return job.ID
}

func payloads(n int) iter.Seq2[json.RawMessage, error] {
	return func(yield func(json.RawMessage, error) bool) {
		for i := 1; i <= n; i++ {
			if !yield(json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), nil) {
				return
			}
		}
	}
}

// taskMessage is task (jobID, taskID) as the relay publishes it, with
// x-retry retries.
func taskMessage(jobID string, taskID int64, retries int) amqp.Publishing {
	body, err := protocol.EncodeTask(protocol.Task{JobID: jobID, TaskID: taskID, Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, taskID))})
	if err != nil {
		panic(err)
	}
	return amqp.Publishing{
		ContentType:   protocol.ContentType,
		DeliveryMode:  amqp.Persistent,
		MessageId:     protocol.MessageID(jobID, taskID),
		CorrelationId: jobID,
		Type:          "echo",
		Headers:       amqp.Table{protocol.HeaderRetry: int64(retries), protocol.HeaderMaxRetries: int64(3)},
		Body:          body,
	}
}

// workerDeadLetter adds the headers a worker adds to a task it
// dead-letters at the given time after its retries.
func workerDeadLetter(msg amqp.Publishing, reason, errText string, at time.Time) amqp.Publishing {
	msg.Headers[protocol.HeaderReason] = reason
	msg.Headers[protocol.HeaderError] = errText
	msg.Headers[protocol.HeaderWorker] = "w1"
	msg.Headers[protocol.HeaderFailedAt] = at.Format(time.RFC3339Nano)
	return msg
}

// deadLetter publishes msg to the dead-letter exchange as a worker does;
// the confirm says the dead-letter queue holds it.
func (b *testBundle) deadLetter(t *testing.T, msg amqp.Publishing) {
	t.Helper()
	require.NoError(t, b.pub.PublishAndWait(context.Background(), b.names.DeadLetterExchange, protocol.RoutingKeyTaskFailed, msg))
}

// dead dead-letters task (jobID, taskID) as a worker whose retries ran
// out at t0+sec.
func (b *testBundle) dead(t *testing.T, jobID string, taskID int64, sec int) {
	t.Helper()
	b.deadLetter(t, workerDeadLetter(taskMessage(jobID, taskID, 3), protocol.ReasonRetriesExhausted, "boom", b.at(sec)))
}

// depth returns the ready messages of queue.
func (b *testBundle) depth(t *testing.T, queue string) int {
	t.Helper()
	return amqptest.QueueDepth(t, b.conn, queue)
}

// waitDepth waits until queue has n ready messages: the broker
// dead-letters asynchronously.
func (b *testBundle) waitDepth(t *testing.T, queue string, n int) {
	t.Helper()
	ch, err := b.conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	var last int
	require.Eventually(t, func() bool {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		if err != nil {
			return false
		}
		last = q.Messages
		return last == n
	}, 10*time.Second, 2*time.Millisecond, "queue %s: want %d messages, last saw %d", queue, n, last)
}

// ids returns "job:task" for each message.
func ids(msgs []deadletters.Message) []string {
	out := make([]string, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, protocol.MessageID(m.JobID, m.TaskID))
	}
	return out
}

// list lists with f and requires no error.
func (b *testBundle) list(t *testing.T, f deadletters.Filter) []deadletters.Message {
	t.Helper()
	msgs, err := b.queue.List(context.Background(), f)
	require.NoError(t, err)
	return msgs
}

// getAll takes every message of queue, acking them.
func (b *testBundle) getAll(t *testing.T, queue string) []amqp.Delivery {
	t.Helper()
	ch, err := b.conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	var out []amqp.Delivery
	for {
		d, ok, err := ch.Get(queue, true)
		require.NoError(t, err)
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

func (b *testBundle) taskState(t *testing.T, jobID string, taskID int64) warren.TaskState {
	t.Helper()
	tasks, _, err := b.store.ListTasks(context.Background(), jobID, store.ListTasksOpts{Limit: 1000})
	require.NoError(t, err)
	for _, task := range tasks {
		if task.TaskID == taskID {
			return task.State
		}
	}
	t.Fatalf("job %s has no task %d", jobID, taskID)
	return ""
}

func TestNewNamesTheMissingField(t *testing.T) {
	t.Parallel()
	names, conn := amqptest.Topology(t, nil)
	pub, err := broker.NewPublisher(conn, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "w.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	full := deadletters.Config{Conn: conn, Publisher: pub, Names: names, Store: s}
	for field, cfg := range map[string]deadletters.Config{
		"Config.Conn":          {Publisher: pub, Names: names, Store: s},
		"Config.Publisher":     {Conn: conn, Names: names, Store: s},
		"Config.Names":         {Conn: conn, Publisher: pub, Store: s},
		"Config.Store":         {Conn: conn, Publisher: pub, Names: names},
		"Config.SettleTimeout": {Conn: conn, Publisher: pub, Names: names, Store: s, SettleTimeout: -1},
	} {
		_, err := deadletters.New(cfg)
		require.ErrorContains(t, err, field)
	}
	_, err = deadletters.New(full)
	require.NoError(t, err)
}

func TestListIsNonDestructive(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	// Published out of dead-letter time order.
	b.dead(t, "job-a", 2, 3)
	b.dead(t, "job-b", 1, 1)
	b.dead(t, "job-a", 1, 2)
	b.dead(t, "job-b", 2, 5)
	b.dead(t, "job-a", 3, 4)
	all := []string{"job-b:1", "job-a:1", "job-a:2", "job-a:3", "job-b:2"}

	msgs := b.list(t, deadletters.Filter{})
	require.Equal(t, all, ids(msgs), "oldest dead letter first")
	require.Equal(t, deadletters.Message{JobID: "job-b", TaskID: 1, MessageID: "job-b:1", RoutingKey: protocol.RoutingKeyTaskFailed,
		Reason: protocol.ReasonRetriesExhausted, Error: "boom", Attempts: 4, Time: b.at(1),
		Settled: deadletters.SettledJobDeleted}, msgs[0], "the store has no job-b")
	require.Equal(t, 5, b.depth(t, b.names.TasksDLQ), "listing leaves every message in the queue")

	for range 3 {
		require.Equal(t, all, ids(b.list(t, deadletters.Filter{})), "the same messages in the same order every time")
		require.Equal(t, 5, b.depth(t, b.names.TasksDLQ))
	}
	require.Equal(t, []string{"job-a:1", "job-a:2", "job-a:3"}, ids(b.list(t, deadletters.Filter{JobID: "job-a"})))
	require.Equal(t, []string{"job-b:1", "job-a:1"}, ids(b.list(t, deadletters.Filter{Limit: 2})))
	require.Equal(t, []string{"job-a:1", "job-a:2"}, ids(b.list(t, deadletters.Filter{JobID: "job-a", Limit: 2})))
	require.Equal(t, all, ids(b.list(t, deadletters.Filter{Limit: 50})))
	none := b.list(t, deadletters.Filter{JobID: "job-c"})
	require.NotNil(t, none)
	require.Empty(t, none)
	require.Equal(t, 5, b.depth(t, b.names.TasksDLQ))
}

func TestListEmptyQueue(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	msgs := b.list(t, deadletters.Filter{})
	require.NotNil(t, msgs)
	require.Empty(t, msgs)
}

// A task the broker dead-letters (rejected, or over the delivery limit)
// carries x-death instead of the worker's headers.
func TestListDecodesBrokerDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	// A real one: a task rejected from the work queue.
	require.NoError(t, b.pub.PublishAndWait(context.Background(), b.names.JobsExchange, protocol.RoutingKeyTask, taskMessage("job-r", 1, 2)))
	ch, err := b.conn.Channel()
	require.NoError(t, err)
	d, ok, err := ch.Get(b.names.TasksQueue, false)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, d.Reject(false))
	require.NoError(t, ch.Close())
	b.waitDepth(t, b.names.TasksDLQ, 1)

	// One over the delivery limit after waiting in a retry tier: the
	// most recent x-death entry is the one that counts.
	msg := taskMessage("job-d", 4, 1)
	msg.Headers["x-death"] = []any{
		amqp.Table{"queue": b.names.TasksQueue, "reason": "delivery_limit", "count": int64(1), "exchange": b.names.JobsExchange,
			"routing-keys": []any{protocol.RoutingKeyTask}, "time": b.at(10)},
		amqp.Table{"queue": b.names.RetryQueue("1s"), "reason": "expired", "count": int64(1), "exchange": b.names.RetryExchange,
			"routing-keys": []any{"1s"}, "time": b.at(9)},
	}
	msg.Headers["x-first-death-reason"] = "expired"
	msg.Headers["x-first-death-queue"] = b.names.RetryQueue("1s")
	b.deadLetter(t, msg)

	msgs := b.list(t, deadletters.Filter{})
	require.Len(t, msgs, 2)
	require.Equal(t, deadletters.Message{JobID: "job-d", TaskID: 4, MessageID: "job-d:4", RoutingKey: protocol.RoutingKeyTaskFailed,
		Reason: protocol.ReasonDeliveryLimit, Error: fmt.Sprintf("dead-lettered by the broker from %q: delivery_limit", b.names.TasksQueue),
		Attempts: 2, Time: b.at(10), Settled: deadletters.SettledJobDeleted}, msgs[0])

	rejected := msgs[1]
	require.Equal(t, "job-r", rejected.JobID)
	require.Equal(t, int64(1), rejected.TaskID)
	require.Equal(t, protocol.ReasonRejected, rejected.Reason)
	require.Equal(t, fmt.Sprintf("dead-lettered by the broker from %q: rejected", b.names.TasksQueue), rejected.Error)
	require.Equal(t, 3, rejected.Attempts, "x-retry 2: the third run")
	require.Equal(t, protocol.RoutingKeyTaskFailed, rejected.RoutingKey)
	require.WithinDuration(t, time.Now(), rejected.Time, time.Minute)

	// Listing redelivers: the broker's x-delivery-count grows, the
	// attempts do not.
	require.Equal(t, msgs, b.list(t, deadletters.Filter{}))
}

func TestListShowsMalformedMessages(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	notJSON := workerDeadLetter(amqp.Publishing{MessageId: "job-m:7", Headers: amqp.Table{}, Body: []byte("not json")},
		protocol.ReasonMalformed, "malformed message: body is not a JSON object", b.at(1))
	b.deadLetter(t, notJSON)
	// No header at all, a job id in the body and a task id that is not
	// one.
	b.deadLetter(t, amqp.Publishing{MessageId: "m-2", Body: []byte(`{"job_id":"job-m","task_id":"x"}`)})

	msgs := b.list(t, deadletters.Filter{})
	require.Len(t, msgs, 2)
	bare := msgs[0] // no time: first
	require.Equal(t, "job-m", bare.JobID)
	require.Zero(t, bare.TaskID)
	require.Equal(t, protocol.ReasonMalformed, bare.Reason)
	require.Contains(t, bare.Error, "malformed message")
	require.Equal(t, 1, bare.Attempts)
	require.True(t, bare.Time.IsZero())
	require.Equal(t, deadletters.Message{JobID: "job-m", TaskID: 7, MessageID: "job-m:7", RoutingKey: protocol.RoutingKeyTaskFailed,
		Reason: protocol.ReasonMalformed, Error: "malformed message: body is not a JSON object", Attempts: 1, Time: b.at(1)}, msgs[1])
	require.Len(t, b.list(t, deadletters.Filter{JobID: "job-m"}), 2)
}

func TestReplayRepublishesWithRetriesReset(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	jobA := b.failedJob(t, 3, 1, 2) // task 3 is still running
	jobB := b.failedJob(t, 1, 1)

	first := workerDeadLetter(taskMessage(jobA, 1, 3), protocol.ReasonRetriesExhausted, "boom", b.at(1))
	first.UserId = "guest" // the test broker's user; a replay must not repeat it
	first.Headers["traceparent"] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	first.Headers["x-death"] = []any{amqp.Table{"queue": b.names.RetryQueue("1s"), "reason": "expired", "count": int64(3),
		"exchange": b.names.RetryExchange, "routing-keys": []any{"1s"}, "time": b.at(0)}}
	first.Headers["x-first-death-reason"] = "expired"
	first.Headers["x-first-death-queue"] = b.names.RetryQueue("1s")
	first.Headers["x-first-death-exchange"] = b.names.RetryExchange
	b.deadLetter(t, first)
	b.dead(t, jobA, 2, 2)
	b.dead(t, jobB, 1, 3)

	rep, err := b.queue.Replay(context.Background(), deadletters.Filter{JobID: jobA})
	require.NoError(t, err)
	require.Equal(t, deadletters.Report{Replayed: 2}, rep)

	require.Equal(t, []string{jobB + ":1"}, ids(b.list(t, deadletters.Filter{})), "only the replayed messages are removed")
	for _, id := range []int64{1, 2} {
		require.Equal(t, warren.TaskQueued, b.taskState(t, jobA, id))
	}
	require.Equal(t, warren.TaskFailed, b.taskState(t, jobB, 1))
	job, err := b.store.GetJob(context.Background(), jobA)
	require.NoError(t, err)
	require.Equal(t, warren.JobRunning, job.State)
	require.Zero(t, job.FailedTasks)

	tasks := b.getAll(t, b.names.TasksQueue)
	require.Len(t, tasks, 2)
	d := tasks[0]
	if d.MessageId != protocol.MessageID(jobA, 1) {
		d = tasks[1]
	}
	require.Equal(t, protocol.MessageID(jobA, 1), d.MessageId)
	require.Equal(t, first.Body, d.Body)
	delete(d.Headers, "x-delivery-count") // the work queue's own
	require.Equal(t, amqp.Table{
		protocol.HeaderRetry:      int64(0),
		protocol.HeaderMaxRetries: int64(3),
		protocol.HeaderGeneration: int64(2),
		"traceparent":             "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}, d.Headers, "retries reset, at the generation the store reopened the task at, failure headers dropped, the rest kept")
	require.Equal(t, jobA, d.CorrelationId)
	require.Equal(t, "echo", d.Type)
	require.Equal(t, protocol.ContentType, d.ContentType)
	require.Equal(t, amqp.Persistent, d.DeliveryMode)
	require.Empty(t, d.UserId)
}

func TestReplayReopensAClosedJob(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	id := b.failedJob(t, 1, 1)
	open, err := b.store.GetJob(context.Background(), id)
	require.NoError(t, err)
	closed, err := b.store.FinishJob(context.Background(), id, open.Version, warren.JobFailed, nil, "1 task failed")
	require.NoError(t, err)
	require.True(t, closed)
	b.dead(t, id, 1, 1)

	rep, err := b.queue.Replay(context.Background(), deadletters.Filter{})
	require.NoError(t, err)
	require.Equal(t, deadletters.Report{Replayed: 1}, rep)
	job, err := b.store.GetJob(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, warren.JobRunning, job.State)
	require.Equal(t, 1, b.depth(t, b.names.TasksQueue))
	require.Zero(t, b.depth(t, b.names.TasksDLQ))
}

// A message whose task is not failed (any more), whose job is unknown or
// cancelled, or that is not a task at all, is skipped and stays.
func TestReplaySkipsWhatItMustNotReplay(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	id := b.failedJob(t, 2, 1) // task 2 is still queued
	cancelled := b.failedJob(t, 2, 1)
	_, err := b.store.CancelJob(context.Background(), cancelled)
	require.NoError(t, err)

	b.dead(t, id, 1, 1)
	b.dead(t, id, 2, 2)
	b.dead(t, cancelled, 1, 3)
	b.dead(t, "no-such-job", 1, 4)
	b.deadLetter(t, workerDeadLetter(amqp.Publishing{MessageId: protocol.MessageID(id, 1), Headers: amqp.Table{}, Body: []byte("{")},
		protocol.ReasonMalformed, "malformed", b.at(5)))

	rep, err := b.queue.Replay(context.Background(), deadletters.Filter{})
	require.NoError(t, err)
	require.Equal(t, deadletters.Report{Replayed: 1, Skipped: 4}, rep)
	require.Equal(t, 1, b.depth(t, b.names.TasksQueue))
	left := b.list(t, deadletters.Filter{})
	require.Equal(t, []string{id + ":2", cancelled + ":1", "no-such-job:1", id + ":1"}, ids(left))
	require.Equal(t, protocol.ReasonMalformed, left[3].Reason)

	rep, err = b.queue.Replay(context.Background(), deadletters.Filter{})
	require.NoError(t, err)
	require.Equal(t, deadletters.Report{Skipped: 4}, rep, "the task replayed first is not failed any more")
	require.Equal(t, 4, b.depth(t, b.names.TasksDLQ))
}

func TestReplayLimitTakesTheOldest(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	id := b.failedJob(t, 3, 1, 2, 3)
	b.dead(t, id, 1, 3)
	b.dead(t, id, 2, 1)
	b.dead(t, id, 3, 2)

	rep, err := b.queue.Replay(context.Background(), deadletters.Filter{Limit: 2})
	require.NoError(t, err)
	require.Equal(t, deadletters.Report{Replayed: 2}, rep)
	require.Equal(t, []string{id + ":1"}, ids(b.list(t, deadletters.Filter{})))
	require.Equal(t, warren.TaskFailed, b.taskState(t, id, 1))
	require.Equal(t, 2, b.depth(t, b.names.TasksQueue))
}

// A replay the broker does not take leaves the message in the queue and
// the task failed in the store.
func TestReplayThatIsNotPublishedLeavesTheTaskFailed(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	id := b.failedJob(t, 1, 1)
	b.dead(t, id, 1, 1)
	ch, err := b.conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.QueueUnbind(b.names.TasksQueue, protocol.RoutingKeyTask, b.names.JobsExchange, nil))
	require.NoError(t, ch.Close())

	rep, err := b.queue.Replay(context.Background(), deadletters.Filter{})
	require.ErrorIs(t, err, broker.ErrUnroutable)
	require.Equal(t, deadletters.Report{}, rep)
	require.Equal(t, 1, b.depth(t, b.names.TasksDLQ))
	require.Equal(t, warren.TaskFailed, b.taskState(t, id, 1))
	job, err := b.store.GetJob(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, int64(1), job.FailedTasks)
}

// cancellingStore cancels the replay's context on its second
// ReopenTasks, as if the caller went away mid-way.
type cancellingStore struct {
	store.Store
	cancel context.CancelFunc
	calls  int
}

func (s *cancellingStore) ReopenTasks(ctx context.Context, jobID string, taskIDs []int64) (store.Reopening, error) {
	s.calls++
	if s.calls == 2 {
		s.cancel()
		<-ctx.Done()
		return store.Reopening{}, ctx.Err()
	}
	return s.Store.ReopenTasks(ctx, jobID, taskIDs)
}

func TestInterruptedOperationsLoseNothing(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := setup(t, &options{wrap: func(s store.Store) store.Store { return &cancellingStore{Store: s, cancel: cancel} }})
	id := b.failedJob(t, 3, 1, 2, 3)
	for i := range 3 {
		b.dead(t, id, int64(i+1), i)
	}

	rep, err := b.queue.Replay(ctx, deadletters.Filter{})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, deadletters.Report{Replayed: 1}, rep, "the first task was replayed before the interruption")
	b.waitDepth(t, b.names.TasksDLQ, 2)
	require.Equal(t, []string{id + ":2", id + ":3"}, ids(b.list(t, deadletters.Filter{})))

	for name, call := range map[string]func() error{
		"list":         func() error { _, err := b.queue.List(ctx, deadletters.Filter{}); return err },
		"replay":       func() error { _, err := b.queue.Replay(ctx, deadletters.Filter{}); return err },
		"purge by job": func() error { _, err := b.queue.Purge(ctx, deadletters.Filter{JobID: id}); return err },
		"purge all":    func() error { _, err := b.queue.Purge(ctx, deadletters.Filter{}); return err },
	} {
		require.ErrorIs(t, call(), context.Canceled, name)
	}
	require.Equal(t, 2, b.depth(t, b.names.TasksDLQ))
}

func TestPurge(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.dead(t, "job-a", 1, 1)
	b.dead(t, "job-b", 1, 2)
	b.dead(t, "job-a", 2, 3)
	b.dead(t, "job-b", 2, 4)
	b.dead(t, "job-b", 3, 5)

	n, err := b.queue.Purge(context.Background(), deadletters.Filter{JobID: "job-a"})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, []string{"job-b:1", "job-b:2", "job-b:3"}, ids(b.list(t, deadletters.Filter{})))

	n, err = b.queue.Purge(context.Background(), deadletters.Filter{JobID: "job-a"})
	require.NoError(t, err)
	require.Zero(t, n)

	n, err = b.queue.Purge(context.Background(), deadletters.Filter{Limit: 1})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, []string{"job-b:2", "job-b:3"}, ids(b.list(t, deadletters.Filter{})), "the oldest went first")

	n, err = b.queue.Purge(context.Background(), deadletters.Filter{})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Zero(t, b.depth(t, b.names.TasksDLQ))
	require.Empty(t, b.list(t, deadletters.Filter{}))
}

func TestOperationsOnAMissingQueueFail(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ch, err := b.conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDelete(b.names.TasksDLQ, false, false, false)
	require.NoError(t, err)
	require.NoError(t, ch.Close())

	_, err = b.queue.List(context.Background(), deadletters.Filter{})
	require.ErrorContains(t, err, b.names.TasksDLQ)
	var amqpErr *amqp.Error
	require.True(t, errors.As(err, &amqpErr))
	require.Equal(t, amqp.NotFound, amqpErr.Code)
}

// Listing takes every message and gives it back, and RabbitMQ counts each
// return as a delivery: from 4.0, a quorum queue declared without a
// delivery limit drops a message returned more than 20 times (3.x had no
// default limit, so amqptest gives the queue RabbitMQ 4's). The dead-letter
// queue's own limit is out of the listings' reach: 50 listings in a row
// keep every dead letter.
func TestFiftyListingsKeepEveryDeadLetter(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	amqptest.RabbitMQ4DeliveryLimit(t, b.conn, b.names.TasksDLQ)
	var all []string
	for i := range 5 {
		b.dead(t, "job-a", int64(i+1), i)
		all = append(all, protocol.MessageID("job-a", int64(i+1)))
	}
	for i := range 50 {
		require.Equal(t, all, ids(b.list(t, deadletters.Filter{})), "listing %d", i+1)
	}
	require.Equal(t, 5, b.depth(t, b.names.TasksDLQ))
}

// deadAtGeneration dead-letters task (jobID, taskID) of generation as a
// worker whose retries ran out at t0+sec: the message carries the
// x-generation the relay published the task with.
func (b *testBundle) deadAtGeneration(t *testing.T, jobID string, taskID int64, generation, sec int) {
	t.Helper()
	msg := taskMessage(jobID, taskID, 3)
	msg.Headers[protocol.HeaderGeneration] = int64(generation)
	b.deadLetter(t, workerDeadLetter(msg, protocol.ReasonRetriesExhausted, "boom", b.at(sec)))
}

// settled returns "job:task=why" for each message (why "pending" for
// a pending one).
func settled(msgs []deadletters.Message) []string {
	out := make([]string, 0, len(msgs))
	for _, m := range msgs {
		why := m.Settled
		if why == "" {
			why = "pending"
		}
		out = append(out, protocol.MessageID(m.JobID, m.TaskID)+"="+why)
	}
	return out
}

// After a redrive sends a job's failed tasks back, and after a delete
// removes a job, their dead letters are listed as settled, not pending;
// a dead letter of the redriven task's new failure is pending again, and
// one whose failure the store has not recorded yet stays pending.
func TestRedriveAndDeleteSettleDeadLetters(t *testing.T) {
	eachStore(t, func(t *testing.T, opts *options) {
		b := setup(t, opts)
		ctx := context.Background()
		redriven := b.failedJob(t, 2, 1, 2)
		inflight := b.failedJob(t, 1) // its task is still queued
		deleted := b.failedJob(t, 1, 1)
		b.deadAtGeneration(t, redriven, 1, 1, 1)
		b.deadAtGeneration(t, redriven, 2, 1, 2)
		b.deadAtGeneration(t, inflight, 1, 1, 3) // its failure is not recorded yet
		b.deadAtGeneration(t, deleted, 1, 1, 4)
		b.dead(t, "no-such-job", 1, 5)
		require.Equal(t, []string{redriven + ":1=pending", redriven + ":2=pending", inflight + ":1=pending",
			deleted + ":1=pending", "no-such-job:1=" + deadletters.SettledJobDeleted}, settled(b.list(t, deadletters.Filter{})))

		b.finish(t, redriven, warren.JobFailed, nil, "2 tasks failed")
		_, _, err := b.store.RedriveJob(ctx, redriven)
		require.NoError(t, err)
		b.finish(t, deleted, warren.JobFailed, nil, "1 task failed")
		require.NoError(t, b.store.DeleteJob(ctx, deleted))

		require.Equal(t, []string{redriven + ":1=" + deadletters.SettledResent, redriven + ":2=" + deadletters.SettledResent,
			inflight + ":1=pending", deleted + ":1=" + deadletters.SettledJobDeleted, "no-such-job:1=" + deadletters.SettledJobDeleted},
			settled(b.list(t, deadletters.Filter{})))
		require.Equal(t, []string{inflight + ":1=pending"}, settled(b.list(t, deadletters.Filter{Pending: true})),
			"only what still asks for a replay")

		// Task 1 fails again at generation 2: its new dead letter is pending.
		b.relay(t)
		_, err = b.store.ApplyOutcomes(ctx, []store.Outcome{{JobID: redriven, TaskID: 1, State: warren.TaskFailed, Error: "boom", Attempts: 4}})
		require.NoError(t, err)
		b.deadAtGeneration(t, redriven, 1, 2, 6)
		require.Equal(t, []string{inflight + ":1=pending", redriven + ":1=pending"}, settled(b.list(t, deadletters.Filter{Pending: true, Limit: 5})))
		require.Equal(t, []string{inflight + ":1=pending"}, settled(b.list(t, deadletters.Filter{Pending: true, Limit: 1})),
			"the limit counts pending ones")

		// Purging the settled ones removes those four and nothing else.
		n, err := b.queue.Purge(ctx, deadletters.Filter{Settled: true})
		require.NoError(t, err)
		require.Equal(t, 4, n)
		require.Equal(t, []string{inflight + ":1=pending", redriven + ":1=pending"}, settled(b.list(t, deadletters.Filter{})))
	})
}
