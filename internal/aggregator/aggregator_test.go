package aggregator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/aggregator"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/protocol"
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
	a, err := aggregator.New(aggregator.Config{Store: st, Conn: conn, Names: names, BatchSize: 1000, Linger: time.Hour})
	require.NoError(t, err)
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
	deadline := time.Now().Add(10 * time.Second)
	for amqptest.QueueDepth(t, conn, names.ResultsQueue) != 0 {
		require.True(t, time.Now().Before(deadline), "the aggregator did not take the results")
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	require.NoError(t, <-done)

	got, err := st.GetJob(ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, int64(4), got.CompletedTasks, "the batch in hand was recorded")
	require.Zero(t, amqptest.QueueDepth(t, conn, names.ResultsQueue), "and acknowledged, not redelivered")
}
