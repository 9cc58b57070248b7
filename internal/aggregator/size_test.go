package aggregator_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/aggregator"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/store"
)

// The aggregator reads no message over its MaxMessageBytes: each goes to
// the results dead-letter queue, and one whose id names its tasks exactly
// (a single result, a dead letter) fails them at once; a result batch's id
// does not say which tasks it holds, so they are left as they are.
func TestAMessageOverMaxMessageBytesIsNotRead(t *testing.T) {
	t.Parallel()
	names, conn := amqptest.Topology(t, nil)
	st := openStore(t)
	job := createJob(t, st, 8)
	const limit = 64 << 10
	var deliveries atomic.Int64
	settled := make(chan struct{}, 1)
	invalid := make(chan string, 16)
	a, err := aggregator.New(aggregator.Config{Store: st, Conn: conn, Names: names, MaxMessageBytes: limit,
		Hooks: aggregator.Hooks{
			OnBatch: func(size int, _ store.ApplyReport) {
				if deliveries.Add(int64(size)) == 4 {
					settled <- struct{}{}
				}
			},
			OnInvalid: func(_, reason string) { invalid <- reason },
		}})
	require.NoError(t, err)
	run(t, a)

	big := json.RawMessage(`"` + strings.Repeat("x", limit) + `"`)
	// Task 1: a single result over the limit.
	publishResults(t, conn, names, job.ID, 1, 1, func(r *protocol.Result) { r.Result = big })
	// Tasks 2 and 4: a result batch over the limit (task 3 failed elsewhere).
	batch, err := protocol.EncodeResultBatch(protocol.ResultBatch{JobID: job.ID, Results: []protocol.Result{
		{JobID: job.ID, TaskID: 2, Result: big}, {JobID: job.ID, TaskID: 4, Result: json.RawMessage(`1`)}}})
	require.NoError(t, err)
	publish(t, conn, names.ResultsExchange, protocol.RoutingKeyResult,
		amqp.Publishing{MessageId: protocol.BatchMessageID(job.ID, 2, 2), Body: batch})
	// Tasks 5 and 6: a dead letter over the limit.
	body := fmt.Sprintf(`{"job_id":%q,"tasks":[{"task_id":5,"payload":%s},{"task_id":6,"payload":1}]}`, job.ID, big)
	publish(t, conn, names.DeadLetterExchange, protocol.RoutingKeyTaskFailed, amqp.Publishing{
		MessageId: protocol.BatchMessageID(job.ID, 5, 2), Body: []byte(body),
		Headers: amqp.Table{protocol.HeaderReason: protocol.ReasonPermanent, protocol.HeaderError: "bad"}})
	// Task 7: a result within the limit.
	publishResults(t, conn, names, job.ID, 7, 7)
	receive(t, settled, "the four messages")

	for range 3 {
		require.Contains(t, receive(t, invalid, "a message over the limit"), "bytes, over this server's limit of 65536 (--max-message-bytes)")
	}
	require.Eventually(t, func() bool { return amqptest.QueueDepth(t, conn, names.ResultsDLQ) == 3 }, waitTimeout, 10*time.Millisecond)
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer func() { _ = ch.Close() }()
	ids := map[string]bool{}
	for range 3 {
		d, ok, err := ch.Get(names.ResultsDLQ, true)
		require.NoError(t, err)
		require.True(t, ok)
		ids[d.MessageId] = true
		require.Greater(t, len(d.Body), limit, "kept whole")
	}
	require.Equal(t, map[string]bool{
		protocol.MessageID(job.ID, 1): true, protocol.BatchMessageID(job.ID, 2, 2): true, protocol.BatchMessageID(job.ID, 5, 2): true,
	}, ids)

	tasks := taskStates(t, st, job.ID)
	for _, id := range []int64{1, 5, 6} {
		require.Equal(t, warren.TaskFailed, tasks[id].State, "task %d", id)
		require.Contains(t, tasks[id].Error, "over this server's limit of 65536", "task %d", id)
	}
	for _, id := range []int64{2, 3, 4, 8} {
		require.False(t, tasks[id].State.Terminal(), "task %d", id)
	}
	require.Equal(t, warren.TaskCompleted, tasks[7].State)
}

// The aggregator's prefetch holds at most MaxInflightBytes in messages of
// MaxMessageBytes, three quarters for results and a quarter for dead
// letters, and a batch is at most half of both.
func TestPrefetchFitsMaxInflightBytes(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	for _, c := range []struct {
		cfg                 aggregator.Config
		results, dead, size int
	}{
		{aggregator.Config{}, 96, 32, 64},
		{aggregator.Config{MaxMessageBytes: mib}, 384, 128, 256},
		{aggregator.Config{MaxMessageBytes: 64 << 10}, 512, 512, 256},
		{aggregator.Config{BatchSize: 8, MaxInflightBytes: 1 << 30}, 16, 16, 8},
		{aggregator.Config{MaxInflightBytes: 8 * mib}, 1, 1, 1},
	} {
		results, dead, size := aggregator.Prefetch(c.cfg)
		require.Equal(t, []int{c.results, c.dead, c.size}, []int{results, dead, size}, "%+v", c.cfg)
	}
	_, err := aggregator.New(aggregator.Config{Store: openStore(t), Conn: &amqp.Connection{}, Names: protocol.NamesFor("x"), MaxInflightBytes: 4 << 20})
	require.ErrorContains(t, err, "must hold at least two messages")
}
