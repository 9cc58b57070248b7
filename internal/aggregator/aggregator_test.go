package aggregator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/aggregator"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/reduce"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/postgres"
	"github.com/warrenhq/warren/store/postgres/pgtest"
	"github.com/warrenhq/warren/store/sqlite"
)

// A stopping aggregator records the batch it already took instead of
// leaving it to be redelivered.
func TestStopFlushesTheBatchInHand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	names, conn := amqptest.Topology(t, nil)
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "w.db"))
	require.NoError(t, err)
	defer st.Close()
	tasks := func(yield func(json.RawMessage, error) bool) {
		for i := range 5 {
			if !yield(json.RawMessage(fmt.Sprint(i)), nil) {
				return
			}
		}
	}
	job, _, err := st.CreateJob(ctx, store.NewJob{Type: "t", Policy: warren.Policy{Reduce: "collect"}}, tasks)
	require.NoError(t, err)

	// A batch that would wait an hour to fill.
	// A lone first result may be recorded at once; the rest wait in hand.
	var recorded, held atomic.Int64
	inHand := make(chan struct{}, 1)
	signal := func() {
		if recorded.Load()+held.Load() == 4 {
			select {
			case inHand <- struct{}{}:
			default:
			}
		}
	}
	a, err := aggregator.New(aggregator.Config{Store: st, Conn: conn, Names: names, BatchSize: 1000, Linger: time.Hour,
		Hooks: aggregator.Hooks{OnBatch: func(_ int, r store.ApplyReport) {
			recorded.Add(int64(r.Applied))
			held.Store(0)
			signal()
		}}})
	require.NoError(t, err)
	aggregator.OnHeld(a, func(n int) { held.Store(int64(n)); signal() })
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()

	pub, err := broker.NewPublisher(conn, nil)
	require.NoError(t, err)
	defer pub.Close()
	for i := int64(1); i <= 4; i++ {
		body, err := protocol.EncodeResult(protocol.Result{JobID: job.ID, TaskID: i, Result: json.RawMessage(`1`)})
		require.NoError(t, err)
		require.NoError(t, pub.PublishAndWait(ctx, names.ResultsExchange, protocol.RoutingKeyResult,
			amqp.Publishing{MessageId: protocol.MessageID(job.ID, i), DeliveryMode: amqp.Persistent, Body: body}))
	}
	// The aggregator holds them (delivered, unacknowledged) in its batch.
	select {
	case <-inHand:
	case <-time.After(10 * time.Second):
		t.Fatalf("the aggregator did not take the results: %d recorded, %d held", recorded.Load(), held.Load())
	}
	stop()
	require.NoError(t, <-done)

	got, err := st.GetJob(ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, int64(4), got.CompletedTasks, "the batch in hand was recorded")
	require.Zero(t, amqptest.QueueDepth(t, conn, names.ResultsQueue), "and acknowledged, not redelivered")
}

// countReducer counts completed and failed tasks: a reducer that only a
// registry of the embedding program's own holds.
type countReducer struct{ completed, failed int }

func (c *countReducer) Add(_ int64, failed bool, _ json.RawMessage) error {
	if failed {
		c.failed++
	} else {
		c.completed++
	}
	return nil
}

func (c *countReducer) Result() ([]byte, error) {
	return fmt.Appendf(nil, `{"completed":%d,"failed":%d}`, c.completed, c.failed), nil
}

// A job closes with the reducer Config.Reducers holds under its name; with
// no registry given, only the built-ins are known, and a job reduced by
// another stays open for a server that knows its reducer.
func TestCloseJobReducesWithConfigReducers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	names, conn := amqptest.Topology(t, nil)
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "w.db"))
	require.NoError(t, err)
	defer st.Close()
	reducers := reduce.NewRegistry()
	require.NoError(t, reducers.Register("count", func() reduce.Reducer { return &countReducer{} }))

	// newJob creates a three-task job reduced by "count" whose second task
	// failed, ready to close.
	newJob := func() string {
		tasks := func(yield func(json.RawMessage, error) bool) {
			for i := range 3 {
				if !yield(json.RawMessage(fmt.Sprint(i)), nil) {
					return
				}
			}
		}
		job, _, err := st.CreateJob(ctx, store.NewJob{Type: "t", Policy: warren.Policy{Reduce: "count", ToleratedFailures: 1, ToleratedFailurePercent: 50}}, tasks)
		require.NoError(t, err)
		now := time.Now().UTC()
		_, err = st.ApplyOutcomes(ctx, []store.Outcome{
			{JobID: job.ID, TaskID: 1, State: warren.TaskCompleted, Result: json.RawMessage(`1`), FinishedAt: &now},
			{JobID: job.ID, TaskID: 2, State: warren.TaskFailed, Error: "boom", FinishedAt: &now},
			{JobID: job.ID, TaskID: 3, State: warren.TaskCompleted, Result: json.RawMessage(`3`), FinishedAt: &now},
		})
		require.NoError(t, err)
		return job.ID
	}

	custom, err := aggregator.New(aggregator.Config{Store: st, Conn: conn, Names: names, Reducers: reducers})
	require.NoError(t, err)
	id := newJob()
	require.NoError(t, custom.CloseJob(ctx, id))
	job, err := st.GetJob(ctx, id)
	require.NoError(t, err)
	require.Equal(t, warren.JobCompleted, job.State, "error: %s", job.Error)
	result, err := st.JobResult(ctx, id)
	require.NoError(t, err)
	require.JSONEq(t, `{"completed":2,"failed":1}`, string(result))

	builtins, err := aggregator.New(aggregator.Config{Store: st, Conn: conn, Names: names})
	require.NoError(t, err)
	id = newJob()
	require.NoError(t, builtins.CloseJob(ctx, id))
	job, err = st.GetJob(ctx, id)
	require.NoError(t, err)
	require.False(t, job.State.Terminal(), "state %s, error: %s", job.State, job.Error)
	require.NoError(t, custom.CloseJob(ctx, id))
	job, err = st.GetJob(ctx, id)
	require.NoError(t, err)
	require.Equal(t, warren.JobCompleted, job.State, "error: %s", job.Error)
}

// waitTimeout bounds every wait of these tests on the aggregator.
const waitTimeout = 10 * time.Second

// openStore opens a SQLite store of the test's own.
func openStore(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "w.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// createJob creates a job of n tasks.
func createJob(t *testing.T, st store.Store, n int) warren.Job {
	t.Helper()
	tasks := func(yield func(json.RawMessage, error) bool) {
		for i := range n {
			if !yield(json.RawMessage(fmt.Sprint(i)), nil) {
				return
			}
		}
	}
	job, _, err := st.CreateJob(context.Background(), store.NewJob{Type: "t", Policy: warren.Policy{ToleratedFailurePercent: 100}}, tasks)
	require.NoError(t, err)
	return job
}

// publish publishes msg and waits for its confirm.
func publish(t *testing.T, conn *amqp.Connection, exchange, key string, msg amqp.Publishing) {
	t.Helper()
	pub, err := broker.NewPublisher(conn, nil)
	require.NoError(t, err)
	defer pub.Close()
	msg.DeliveryMode = amqp.Persistent
	require.NoError(t, pub.PublishAndWait(context.Background(), exchange, key, msg))
}

// publishResults publishes the results of tasks first..last of job, one
// message each, each changed by the edits given.
func publishResults(t *testing.T, conn *amqp.Connection, names protocol.Names, jobID string, first, last int64, edits ...func(*protocol.Result)) {
	t.Helper()
	for i := first; i <= last; i++ {
		r := protocol.Result{JobID: jobID, TaskID: i, Result: json.RawMessage(`1`)}
		for _, edit := range edits {
			edit(&r)
		}
		body, err := protocol.EncodeResult(r)
		require.NoError(t, err)
		publish(t, conn, names.ResultsExchange, protocol.RoutingKeyResult,
			amqp.Publishing{MessageId: protocol.MessageID(jobID, i), Body: body})
	}
}

// receive returns the next value of c, or fails the test with what it
// waited for.
func receive[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// takeOne consumes one message of queue.
func takeOne(t *testing.T, conn *amqp.Connection, queue string) amqp.Delivery {
	t.Helper()
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer func() { _ = ch.Close() }()
	deliveries, err := ch.Consume(queue, "", true, false, false, false, nil)
	require.NoError(t, err)
	return receive(t, deliveries, "a message in "+queue)
}

// run runs a until the test ends; the test fails if a stops earlier or
// with an error.
func run(t *testing.T, a *aggregator.Aggregator) (stopped <-chan error) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, <-done)
	})
	return done
}

// taskStates returns the state and error of each task of a job, by id.
func taskStates(t *testing.T, st store.Store, jobID string) map[int64]warren.TaskRecord {
	t.Helper()
	tasks, _, err := st.ListTasks(context.Background(), jobID, store.ListTasksOpts{Limit: 1000})
	require.NoError(t, err)
	byID := make(map[int64]warren.TaskRecord, len(tasks))
	for _, task := range tasks {
		byID[task.TaskID] = task
	}
	return byID
}

// refusingStore refuses, every time, a batch that holds the outcome of
// one task, as PostgreSQL refuses a NUL byte in a text column.
type refusingStore struct {
	store.Store
	refuse store.TaskRef
}

// refusal is PostgreSQL's error for a NUL byte in text.
type refusal struct{}

func (refusal) Error() string {
	return `ERROR: invalid byte sequence for encoding "UTF8": 0x00 (SQLSTATE 22021)`
}
func (refusal) SQLState() string { return "22021" }

func (s *refusingStore) ApplyOutcomes(ctx context.Context, outcomes []store.Outcome) (store.ApplyReport, error) {
	for _, o := range outcomes {
		if o.JobID == s.refuse.JobID && o.TaskID == s.refuse.TaskID {
			return store.ApplyReport{}, fmt.Errorf("refusing store: apply outcomes: %w", refusal{})
		}
	}
	return s.Store.ApplyOutcomes(ctx, outcomes)
}

func (s *refusingStore) ApplyOutcomesClosing(ctx context.Context, outcomes []store.Outcome, decide store.CloseDecider) (store.ApplyReport, error) {
	for _, o := range outcomes {
		if o.JobID == s.refuse.JobID && o.TaskID == s.refuse.TaskID {
			return store.ApplyReport{}, fmt.Errorf("refusing store: apply outcomes: %w", refusal{})
		}
	}
	return s.Store.ApplyOutcomesClosing(ctx, outcomes, decide)
}

// batchSeen is what OnBatch was told.
type batchSeen struct {
	size   int
	report store.ApplyReport
}

// A batch with a result that the store refuses for good records every
// other result of the batch, dead-letters that result's message alone,
// and the aggregator goes on with later batches.
func TestAResultTheStoreRefusesIsDeadLetteredAlone(t *testing.T) {
	t.Parallel()
	names, conn := amqptest.Topology(t, nil)
	st := openStore(t)
	job := createJob(t, st, 11)
	batches := make(chan batchSeen, 16)
	invalid := make(chan string, 16)
	a, err := aggregator.New(aggregator.Config{
		Store: &refusingStore{Store: st, refuse: store.TaskRef{JobID: job.ID, TaskID: 4}},
		Conn:  conn, Names: names, BatchSize: 5, Linger: time.Hour,
		Hooks: aggregator.Hooks{
			OnBatch:   func(size int, r store.ApplyReport) { batches <- batchSeen{size, r} },
			OnInvalid: func(queue, reason string) { invalid <- queue + ": " + reason },
		}})
	require.NoError(t, err)
	stopped := run(t, a)

	// A lone result after a quiet spell is recorded at once; the results
	// that follow within the hour-long linger make batches of 5.
	publishResults(t, conn, names, job.ID, 1, 1)
	require.Equal(t, 1, receive(t, batches, "the first result").report.Applied)
	publishResults(t, conn, names, job.ID, 2, 6)
	b := receive(t, batches, "the batch with the refused result (the aggregator retries it forever)")
	require.Equal(t, 5, b.size)
	require.Equal(t, 4, b.report.Applied, "every other result of the batch is recorded")
	reason := receive(t, invalid, "the refused result dead-lettered")
	require.Contains(t, reason, names.ResultsQueue+": ")
	require.Contains(t, reason, "SQLSTATE 22021", "the reason is the store's")
	parked := takeOne(t, conn, names.ResultsDLQ)
	require.Equal(t, protocol.MessageID(job.ID, 4), parked.MessageId, "only the refused result is dead-lettered")

	publishResults(t, conn, names, job.ID, 7, 11)
	b = receive(t, batches, "a later batch")
	require.Equal(t, 5, b.report.Applied)
	select {
	case err := <-stopped:
		t.Fatalf("the aggregator stopped: %v", err)
	case r := <-invalid:
		t.Fatalf("another message was dead-lettered: %s", r)
	default:
	}
	for id, task := range taskStates(t, st, job.ID) {
		if id == 4 {
			require.False(t, task.State.Terminal(), "the refused result changed nothing")
			continue
		}
		require.Equal(t, warren.TaskCompleted, task.State, "task %d", id)
	}
	require.Zero(t, amqptest.QueueDepth(t, conn, names.ResultsQueue), "everything else was acknowledged")
}

// On PostgreSQL, a result whose worker name holds a NUL byte, which
// PostgreSQL refuses in text (SQLSTATE 22021), does not stop the
// aggregator: the other results of its batch are recorded, and later
// batches too. A store that cleans worker-supplied text records it as
// well; one that does not refuses it, and it is dead-lettered alone.
func TestAResultPostgreSQLRefusesDoesNotStopTheAggregator(t *testing.T) {
	t.Parallel()
	names, conn := amqptest.Topology(t, nil)
	st, err := postgres.Open(context.Background(), pgtest.URL(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	job := createJob(t, st, 11)
	batches := make(chan batchSeen, 16)
	invalid := make(chan string, 16)
	a, err := aggregator.New(aggregator.Config{Store: st, Conn: conn, Names: names, BatchSize: 5, Linger: time.Hour,
		Hooks: aggregator.Hooks{
			OnBatch:   func(size int, r store.ApplyReport) { batches <- batchSeen{size, r} },
			OnInvalid: func(_, reason string) { invalid <- reason },
		}})
	require.NoError(t, err)
	stopped := run(t, a)

	publishResults(t, conn, names, job.ID, 1, 1)
	require.Equal(t, 1, receive(t, batches, "the first result").report.Applied)
	publishResults(t, conn, names, job.ID, 2, 3)
	publishResults(t, conn, names, job.ID, 4, 4, func(r *protocol.Result) { r.Worker = "w\x00" })
	publishResults(t, conn, names, job.ID, 5, 6)
	b := receive(t, batches, "the batch with the NUL byte (the aggregator retries it forever)")
	require.Equal(t, 5, b.size)
	if b.report.Applied == 4 {
		require.Contains(t, receive(t, invalid, "the refused result dead-lettered"), "SQLSTATE 22021")
		require.Equal(t, protocol.MessageID(job.ID, 4), takeOne(t, conn, names.ResultsDLQ).MessageId)
	} else {
		require.Equal(t, 5, b.report.Applied, "every result of the batch is recorded")
	}

	publishResults(t, conn, names, job.ID, 7, 11)
	require.Equal(t, 5, receive(t, batches, "a later batch").report.Applied)
	select {
	case err := <-stopped:
		t.Fatalf("the aggregator stopped: %v", err)
	default:
	}
	got, err := st.GetJob(context.Background(), job.ID)
	require.NoError(t, err)
	require.EqualValues(t, 6+b.report.Applied, got.CompletedTasks)
}

// deepPayload is a JSON value nested deeper than Go's decoder accepts.
func deepPayload() string {
	return strings.Repeat("[", 10_001) + strings.Repeat("]", 10_001)
}

// A dead letter whose body the aggregator cannot read still fails its
// tasks at once, found from the body's ids or the message id (a task's, or
// a batch's range); only one that names no task is parked in results.dlq.
func TestAnUnreadableDeadLetterFailsItsTasksAtOnce(t *testing.T) {
	t.Parallel()
	names, conn := amqptest.Topology(t, nil)
	st := openStore(t)
	job := createJob(t, st, 6)
	var deliveries atomic.Int64
	settled := make(chan struct{}, 1)
	invalid := make(chan string, 16)
	a, err := aggregator.New(aggregator.Config{Store: st, Conn: conn, Names: names,
		Hooks: aggregator.Hooks{
			OnBatch: func(size int, _ store.ApplyReport) {
				if deliveries.Add(int64(size)) == 4 {
					settled <- struct{}{}
				}
			},
			OnInvalid: func(queue, reason string) { invalid <- reason },
		}})
	require.NoError(t, err)
	run(t, a)

	malformed := func(id, body string) amqp.Publishing {
		return amqp.Publishing{MessageId: id, Body: []byte(body), Headers: amqp.Table{
			protocol.HeaderReason: protocol.ReasonMalformed, protocol.HeaderWorker: "w1",
			protocol.HeaderError: "malformed message: exceeded max depth", protocol.HeaderRetry: int64(0)}}
	}
	for _, msg := range []amqp.Publishing{
		// A batch of tasks 1 and 2, its first payload too deep to decode.
		malformed(protocol.BatchMessageID(job.ID, 1, 2),
			fmt.Sprintf(`{"job_id":%q,"tasks":[{"task_id":1,"payload":%s},{"task_id":2,"payload":2}]}`, job.ID, deepPayload())),
		malformed(protocol.MessageID(job.ID, 3), "not json"),
		malformed(protocol.BatchMessageID(job.ID, 4, 2), "\x00garbage"),
		malformed("raw-1", "not json"),
	} {
		publish(t, conn, names.DeadLetterExchange, protocol.RoutingKeyTaskFailed, msg)
	}
	receive(t, settled, "the four dead letters")

	tasks := taskStates(t, st, job.ID)
	for id := int64(1); id <= 5; id++ {
		require.Equal(t, warren.TaskFailed, tasks[id].State, "task %d", id)
		require.Contains(t, tasks[id].Error, "dead letter could not be read", "task %d", id)
	}
	require.False(t, tasks[6].State.Terminal(), "task 6 was in no dead letter")
	require.Contains(t, tasks[1].Error, "exceeded max depth")
	require.Contains(t, receive(t, invalid, "the dead letter naming no task"), "malformed")
	require.Equal(t, "raw-1", takeOne(t, conn, names.ResultsDLQ).MessageId, "only the dead letter naming no task is parked")
	got, err := st.GetJob(context.Background(), job.ID)
	require.NoError(t, err)
	require.EqualValues(t, 5, got.FailedTasks)
}

// A result batch (results of several tasks in one message) with a result
// that the store refuses records every other result it carries, and is
// dead-lettered whole for people to see; the refused task is left as it
// was, for the reconciler.
func TestAResultBatchWithAResultTheStoreRefusesRecordsTheRest(t *testing.T) {
	t.Parallel()
	names, conn := amqptest.Topology(t, nil)
	st := openStore(t)
	job := createJob(t, st, 6)
	batches := make(chan batchSeen, 16)
	invalid := make(chan string, 16)
	a, err := aggregator.New(aggregator.Config{
		Store: &refusingStore{Store: st, refuse: store.TaskRef{JobID: job.ID, TaskID: 4}},
		Conn:  conn, Names: names,
		Hooks: aggregator.Hooks{
			OnBatch:   func(size int, r store.ApplyReport) { batches <- batchSeen{size, r} },
			OnInvalid: func(queue, reason string) { invalid <- queue + ": " + reason },
		}})
	require.NoError(t, err)
	run(t, a)

	results := make([]protocol.Result, 6)
	for i := range results {
		results[i] = protocol.Result{TaskID: int64(i + 1), Result: json.RawMessage(`1`)}
	}
	body, err := protocol.EncodeResultBatch(protocol.ResultBatch{JobID: job.ID, Results: results})
	require.NoError(t, err)
	publish(t, conn, names.ResultsExchange, protocol.RoutingKeyResult,
		amqp.Publishing{MessageId: protocol.BatchMessageID(job.ID, 1, 6), Body: body})

	b := receive(t, batches, "the result batch")
	require.Equal(t, 5, b.report.Applied, "every other result of the batch is recorded")
	require.Contains(t, receive(t, invalid, "the batch dead-lettered"), "SQLSTATE 22021")
	parked := takeOne(t, conn, names.ResultsDLQ)
	require.Equal(t, protocol.BatchMessageID(job.ID, 1, 6), parked.MessageId, "the whole batch, for people to see")
	for id, task := range taskStates(t, st, job.ID) {
		if id == 4 {
			require.False(t, task.State.Terminal(), "the refused result changed nothing")
			continue
		}
		require.Equal(t, warren.TaskCompleted, task.State, "task %d", id)
	}
}

// A batch that holds a job's last results stops lingering, and records
// them with the job's close in one transaction: with an hour-long linger,
// the job's last three results are recorded, and the job closed, as soon
// as they are all in hand.
func TestABatchThatEndsAJobStopsLingeringAndClosesIt(t *testing.T) {
	t.Parallel()
	names, conn := amqptest.Topology(t, nil)
	st := openStore(t)
	job := createJob(t, st, 4)
	batches := make(chan batchSeen, 16)
	closed := make(chan string, 4)
	a, err := aggregator.New(aggregator.Config{Store: st, Conn: conn, Names: names, BatchSize: 100, Linger: time.Hour,
		Hooks: aggregator.Hooks{
			OnBatch:     func(size int, r store.ApplyReport) { batches <- batchSeen{size, r} },
			OnJobClosed: func(id string, _ warren.JobState) { closed <- id },
		}})
	require.NoError(t, err)
	run(t, a)

	publishResults(t, conn, names, job.ID, 1, 1)
	first := receive(t, batches, "the first result, recorded at once")
	require.Equal(t, map[string]int64{job.ID: 3}, first.report.Unfinished)
	publishResults(t, conn, names, job.ID, 2, 4)
	var held int
	for held < 3 {
		b := receive(t, batches, "the job's last results, before the hour-long linger ends")
		held += b.size
		if held == 3 {
			require.Len(t, b.report.ClosedJobs, 1, "the batch with the last result closed the job")
			require.Equal(t, job.ID, b.report.ClosedJobs[0].Job.ID)
			require.Empty(t, b.report.ReadyToClose)
		}
	}
	require.Equal(t, job.ID, receive(t, closed, "the close reported"))
	got, err := st.GetJob(t.Context(), job.ID)
	require.NoError(t, err)
	require.Equal(t, warren.JobCompleted, got.State)
}
