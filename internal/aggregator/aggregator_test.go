package aggregator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
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
