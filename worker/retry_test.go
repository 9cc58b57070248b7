package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/worker"
)

// A transient failure waits in its retry tier, not in the worker: the
// nth retry runs no sooner than the nth tier's delay after the run that
// failed, and not much later.
func TestRunRetryDelaysHonourTheTiers(t *testing.T) {
	t.Parallel()
	tiers := []time.Duration{200 * time.Millisecond, 400 * time.Millisecond}
	b := setupTiers(t, tiers)
	type run struct {
		task worker.Task
		at   time.Time
	}
	runs := make(chan run, 10)
	rw := b.start(t, worker.Config{}, map[string]worker.HandlerFunc{
		taskType: func(ctx context.Context, task worker.Task) (any, error) {
			runs <- run{task, time.Now()}
			if task.Attempt < 3 {
				return nil, fmt.Errorf("flaky %d", task.Attempt)
			}
			return square(ctx, task)
		},
	})
	b.publishTask(t, taskType, "job-h", 4, `{"x": 4}`, retries(5))

	evs := rw.expect(t, worker.EventRetried, worker.EventRetried, worker.EventCompleted)
	require.EqualError(t, evs[0].Err, "flaky 1")
	require.EqualError(t, evs[1].Err, "flaky 2")
	require.Equal(t, tiers[0], evs[0].Delay)
	require.Equal(t, tiers[1], evs[1].Delay)

	var prev time.Time
	for i := 1; i <= 3; i++ {
		r := recv(t, runs, "handler call")
		require.Equal(t, i, r.task.Attempt)
		require.Equal(t, 5, r.task.MaxRetries, "x-max-retries is kept on retries")
		require.JSONEq(t, `{"x": 4}`, string(r.task.Payload))
		if i > 1 {
			gap, tier := r.at.Sub(prev), tiers[i-2]
			require.GreaterOrEqual(t, gap, tier, "retry %d ran before its tier's delay", i-1)
			require.Less(t, gap, tier+2*time.Second, "retry %d ran long after its tier's delay", i-1)
		}
		prev = r.at
	}

	r, _ := b.result(t)
	require.Equal(t, protocol.StatusCompleted, r.Status)
	require.Equal(t, 3, r.Attempt)
	require.JSONEq(t, `{"square": 16}`, string(r.Result))
	require.NoError(t, rw.stop())
	require.Zero(t, b.depth(t, b.names.TasksQueue))
	require.Zero(t, b.depth(t, b.names.ResultsQueue))
	for _, d := range tiers {
		require.Zero(t, b.depth(t, b.names.RetryQueue(protocol.RetryTierName(d))))
	}
}

// The retry copy is the task message with x-retry incremented and the
// other headers kept, in the tier the retry count picks: the first retry
// in the first tier, every retry past the last tier in the last. Tiers of
// minutes keep the copies in place for the test to read.
func TestRunRetryCopyWaitsInItsTier(t *testing.T) {
	t.Parallel()
	b := setupTiers(t, []time.Duration{time.Minute, 2 * time.Minute})
	rw := b.start(t, worker.Config{Name: "w-retry"}, map[string]worker.HandlerFunc{
		taskType: func(context.Context, worker.Task) (any, error) { return nil, fmt.Errorf("flaky") },
	})
	b.publish(t, amqp.Publishing{
		MessageId: protocol.MessageID("job-r", 1), CorrelationId: "job-r", Type: taskType,
		DeliveryMode: amqp.Persistent, Expiration: "30000", // would cut the 1m tier short if kept
		Headers: amqp.Table{
			protocol.HeaderRetry: int64(0), protocol.HeaderMaxRetries: int64(5), "traceparent": "00-abc-def-01",
		},
		Body: []byte(`{"job_id": "job-r", "task_id": 1, "payload": {"x": 1}}`),
	})
	b.publishTask(t, taskType, "job-r", 2, `{"x": 2}`, amqp.Table{
		protocol.HeaderRetry: int64(4), protocol.HeaderMaxRetries: int64(9),
	})
	delays := map[int64]time.Duration{}
	for _, ev := range rw.expect(t, worker.EventRetried, worker.EventRetried) {
		delays[ev.TaskID] = ev.Delay
	}
	require.Equal(t, map[int64]time.Duration{1: time.Minute, 2: 2 * time.Minute}, delays)

	first := b.get(t, b.names.RetryQueue("1m"))
	require.Equal(t, protocol.MessageID("job-r", 1), first.MessageId)
	require.Equal(t, int64(1), first.Headers[protocol.HeaderRetry])
	require.Equal(t, int64(5), first.Headers[protocol.HeaderMaxRetries])
	require.Equal(t, "00-abc-def-01", first.Headers["traceparent"])
	require.Equal(t, "job-r", first.CorrelationId)
	require.Equal(t, taskType, first.Type)
	require.Equal(t, amqp.Persistent, first.DeliveryMode)
	require.Empty(t, first.Expiration, "the tier alone sets the delay")
	task, err := protocol.DecodeTask(first.Body)
	require.NoError(t, err)
	require.JSONEq(t, `{"x": 1}`, string(task.Payload))

	fifth := b.get(t, b.names.RetryQueue("2m"))
	require.Equal(t, protocol.MessageID("job-r", 2), fifth.MessageId)
	require.Equal(t, int64(5), fifth.Headers[protocol.HeaderRetry])
	require.Equal(t, int64(9), fifth.Headers[protocol.HeaderMaxRetries])

	require.NoError(t, rw.stop())
	require.Zero(t, b.depth(t, b.names.TasksQueue), "the originals were acked")
}
