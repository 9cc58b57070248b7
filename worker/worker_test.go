package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/worker"
)

// square returns {"square": x*x} for a payload {"x": n}.
func square(_ context.Context, t worker.Task) (any, error) {
	var in struct{ X int }
	if err := json.Unmarshal(t.Payload, &in); err != nil {
		return nil, worker.Permanent(err)
	}
	return map[string]int{"square": in.X * in.X}, nil
}

func TestRunPublishesTheResultThenAcks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seen := make(chan worker.Task, 1)
	rw := b.start(t, worker.Config{Name: "w-1"}, map[string]worker.HandlerFunc{
		taskType: func(ctx context.Context, task worker.Task) (any, error) {
			seen <- task
			return square(ctx, task)
		},
	})
	headers := retries(5)
	headers[protocol.HeaderGeneration] = int64(3)
	b.publishTask(t, taskType, "job-a", 7, `{"x": 7}`, headers)

	ev := rw.expect(t, worker.EventCompleted)[0]
	require.Positive(t, ev.Duration, "the handler's run time")
	ev.Duration = 0
	require.Equal(t, worker.Event{Kind: worker.EventCompleted, JobID: "job-a", TaskID: 7, Type: taskType, Attempt: 1}, ev)

	task := recv(t, seen, "handler call")
	require.Equal(t, "job-a", task.JobID)
	require.EqualValues(t, 7, task.TaskID)
	require.Equal(t, taskType, task.Type)
	require.Equal(t, 1, task.Attempt)
	require.Equal(t, 5, task.MaxRetries)
	require.JSONEq(t, `{"x": 7}`, string(task.Payload))
	require.Equal(t, protocol.MessageID("job-a", 7), task.IdempotencyKey())

	r, d := b.result(t)
	require.Equal(t, protocol.MessageID("job-a", 7), d.MessageId)
	require.Equal(t, "job-a", d.CorrelationId)
	require.Equal(t, protocol.ContentType, d.ContentType)
	require.Equal(t, amqp.Persistent, d.DeliveryMode)
	require.Equal(t, int64(3), d.Headers[protocol.HeaderGeneration], "the result carries the task's generation")
	require.Equal(t, "job-a", r.JobID)
	require.EqualValues(t, 7, r.TaskID)
	require.Equal(t, protocol.StatusCompleted, r.Status)
	require.JSONEq(t, `{"square": 49}`, string(r.Result))
	require.Equal(t, "w-1", r.Worker)
	require.Equal(t, 1, r.Attempt)
	require.NotNil(t, r.StartedAt)
	require.NotNil(t, r.FinishedAt)
	require.False(t, r.FinishedAt.Before(*r.StartedAt), "finished %v before started %v", r.FinishedAt, r.StartedAt)

	require.NoError(t, rw.stop())
	// Stopping closed the worker's channel: an unacked task would be back.
	require.Zero(t, b.depth(t, b.names.TasksQueue), "the task was not acked")
	require.Zero(t, b.depth(t, b.names.ResultsQueue), "more than one result")
}

// The body is the source of truth: a task with no properties but its
// type still runs, with the default retry budget, and its result carries
// the ids.
func TestRunNeedsNoPropertiesButTheType(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seen := make(chan worker.Task, 1)
	rw := b.start(t, worker.Config{}, map[string]worker.HandlerFunc{
		taskType: func(_ context.Context, task worker.Task) (any, error) {
			seen <- task
			return json.RawMessage(`[1, 2]`), nil
		},
	})
	b.publish(t, amqp.Publishing{MessageId: "x", Type: taskType, Body: []byte(`{"job_id": "job-b", "task_id": 2}`)})

	rw.expect(t, worker.EventCompleted)
	task := recv(t, seen, "handler call")
	require.Equal(t, 1, task.Attempt)
	require.Equal(t, warren.DefaultMaxRetries, task.MaxRetries)
	require.Equal(t, "null", string(task.Payload))

	r, d := b.result(t)
	require.Equal(t, protocol.MessageID("job-b", 2), d.MessageId)
	require.Equal(t, "job-b", d.CorrelationId)
	require.JSONEq(t, `[1, 2]`, string(r.Result))
}

// Results are published as tasks finish, not in task order: here the
// tasks finish in reverse, and every result still carries its own value.
func TestRunResultsFollowCompletionNotTaskOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 8
	var finished [n + 2]chan struct{}
	for i := range finished {
		finished[i] = make(chan struct{})
	}
	close(finished[n+1]) // the last task waits for no one
	rw := b.start(t, worker.Config{
		Concurrency: n,
		OnEvent: func(ev worker.Event) {
			if ev.Kind == worker.EventCompleted {
				close(finished[ev.TaskID])
			}
		},
	}, map[string]worker.HandlerFunc{
		taskType: func(ctx context.Context, task worker.Task) (any, error) {
			select {
			case <-finished[task.TaskID+1]:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return square(ctx, task)
		},
	})
	for i := int64(1); i <= n; i++ {
		b.publishTask(t, taskType, "job-c", i, fmt.Sprintf(`{"x": %d}`, i), nil)
	}
	evs := rw.expect(t, repeat(worker.EventCompleted, n)...)
	for i, ev := range evs {
		require.EqualValues(t, n-i, ev.TaskID, "completion order")
	}
	for i := n; i >= 1; i-- {
		r, _ := b.result(t)
		require.EqualValues(t, i, r.TaskID, "results arrive in completion order")
		require.JSONEq(t, fmt.Sprintf(`{"square": %d}`, i*i), string(r.Result))
	}
}

func TestRunNeverExceedsConcurrency(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const concurrency, tasks = 4, 24
	var running, most atomic.Int64
	full := make(chan struct{}, 1)
	gate := make(chan struct{})
	rw := b.start(t, worker.Config{Concurrency: concurrency}, map[string]worker.HandlerFunc{
		taskType: func(ctx context.Context, task worker.Task) (any, error) {
			now := running.Add(1)
			defer running.Add(-1)
			for {
				m := most.Load()
				if now <= m || most.CompareAndSwap(m, now) {
					break
				}
			}
			if now == concurrency {
				select {
				case full <- struct{}{}:
				default:
				}
			}
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return task.TaskID, nil
		},
	})
	for i := int64(1); i <= tasks; i++ {
		b.publishTask(t, taskType, "job-d", i, `{}`, nil)
	}
	// With 4 handlers blocked and 4 more tasks prefetched, a fifth handler
	// would start now if the pool let it.
	recv(t, full, "all handlers busy")
	close(gate)
	rw.expect(t, repeat(worker.EventCompleted, tasks)...)
	require.EqualValues(t, concurrency, most.Load())
}

func TestRunRetriesAPanicThenDeadLettersIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var runs atomic.Int64
	rw := b.start(t, worker.Config{Name: "w-panic"}, map[string]worker.HandlerFunc{
		taskType: func(context.Context, worker.Task) (any, error) {
			runs.Add(1)
			panic("boom")
		},
	})
	headers := retries(2)
	headers[protocol.HeaderGeneration] = int64(4)
	b.publishTask(t, taskType, "job-e", 1, `{"x": 1}`, headers)

	evs := rw.expect(t, worker.EventRetried, worker.EventRetried, worker.EventDeadLettered)
	for i, ev := range evs {
		require.Equal(t, i+1, ev.Attempt)
		require.ErrorContains(t, ev.Err, "boom")
	}
	require.Equal(t, protocol.ReasonRetriesExhausted, evs[2].Reason)
	require.EqualValues(t, 3, runs.Load())

	for _, q := range []string{b.names.TasksDLQ, b.names.DeadQueue} {
		d := b.get(t, q)
		requireDeadLetter(t, d, protocol.ReasonRetriesExhausted, "boom", "w-panic")
		require.Equal(t, int64(2), d.Headers[protocol.HeaderRetry], "retries so far, in %s", q)
		require.Equal(t, int64(2), d.Headers[protocol.HeaderMaxRetries], "in %s", q)
		require.Equal(t, int64(4), d.Headers[protocol.HeaderGeneration], "the generation, through the retries, in %s", q)
		require.Equal(t, protocol.MessageID("job-e", 1), d.MessageId)
		require.Equal(t, "job-e", d.CorrelationId)
		require.Equal(t, taskType, d.Type)
		task, err := protocol.DecodeTask(d.Body)
		require.NoError(t, err)
		require.JSONEq(t, `{"x": 1}`, string(task.Payload))
	}
	require.NoError(t, rw.stop())
	require.Zero(t, b.depth(t, b.names.TasksQueue))
	require.Zero(t, b.depth(t, b.names.ResultsQueue))
}

func TestRunPermanentErrorIsDeadLetteredWithoutRetry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var runs atomic.Int64
	rw := b.start(t, worker.Config{Name: "w-perm"}, map[string]worker.HandlerFunc{
		taskType: func(context.Context, worker.Task) (any, error) {
			runs.Add(1)
			return nil, worker.Permanent(errors.New("bad input"))
		},
	})
	b.publishTask(t, taskType, "job-f", 3, `{}`, retries(3))

	ev := rw.expect(t, worker.EventDeadLettered)[0]
	require.True(t, worker.IsPermanent(ev.Err))
	require.Equal(t, protocol.ReasonPermanent, ev.Reason)
	require.Equal(t, 1, ev.Attempt)

	for _, q := range []string{b.names.TasksDLQ, b.names.DeadQueue} {
		d := b.get(t, q)
		requireDeadLetter(t, d, protocol.ReasonPermanent, "bad input", "w-perm")
		require.Equal(t, int64(0), d.Headers[protocol.HeaderRetry], "no retry, in %s", q)
		started, ok := d.Headers[protocol.HeaderStartedAt].(string)
		require.True(t, ok, "the failed run's start, in %s", q)
		_, err := time.Parse(time.RFC3339Nano, started)
		require.NoError(t, err)
	}
	require.NoError(t, rw.stop())
	require.EqualValues(t, 1, runs.Load())
	require.Zero(t, b.depth(t, b.names.TasksQueue))
	require.Zero(t, b.depth(t, b.names.ResultsQueue), "no result message")
}

// A result that cannot be marshalled can never be published: the task
// fails permanently instead of retrying in vain.
func TestRunUnmarshallableResultFailsTheTask(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rw := b.start(t, worker.Config{Name: "w-marshal"}, map[string]worker.HandlerFunc{
		taskType: func(context.Context, worker.Task) (any, error) { return func() {}, nil },
	})
	b.publishTask(t, taskType, "job-g", 1, `{}`, nil)

	rw.expect(t, worker.EventDeadLettered)
	d := b.get(t, b.names.DeadQueue)
	require.Equal(t, protocol.ReasonPermanent, d.Headers[protocol.HeaderReason])
	require.Contains(t, d.Headers[protocol.HeaderError], "func()")
}

func TestRunDeadLettersAMalformedBody(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rw := b.start(t, worker.Config{Name: "w-bodies"}, map[string]worker.HandlerFunc{
		taskType: func(context.Context, worker.Task) (any, error) { return nil, nil },
	})
	b.publish(t, amqp.Publishing{MessageId: "bad-1", Type: taskType, Body: []byte("not json")})
	// Not even a message id: the dead letter needs one of its own.
	ch, err := b.admin.Channel()
	require.NoError(t, err)
	defer func() { _ = ch.Close() }()
	require.NoError(t, ch.PublishWithContext(context.Background(), b.names.JobsExchange, protocol.RoutingKeyTask, true, false,
		amqp.Publishing{Body: []byte(`{"job_id": "", "task_id": 0}`)}))

	evs := rw.expect(t, worker.EventDeadLettered, worker.EventDeadLettered)
	bodies := map[string]bool{}
	for _, ev := range evs {
		require.Equal(t, protocol.ReasonMalformed, ev.Reason)
		require.ErrorIs(t, ev.Err, protocol.ErrMalformed)
	}
	for _, q := range []string{b.names.TasksDLQ, b.names.DeadQueue} {
		for range 2 {
			d := b.get(t, q)
			requireDeadLetter(t, d, protocol.ReasonMalformed, "malformed", "w-bodies")
			require.NotEmpty(t, d.MessageId)
			bodies[q+" "+string(d.Body)] = true
		}
	}
	require.Equal(t, map[string]bool{
		b.names.TasksDLQ + " not json":                      true,
		b.names.TasksDLQ + ` {"job_id": "", "task_id": 0}`:  true,
		b.names.DeadQueue + " not json":                     true,
		b.names.DeadQueue + ` {"job_id": "", "task_id": 0}`: true,
	}, bodies)
}

// A result the broker does not confirm must not cost the task: it stays
// unacked, runs again, and its result arrives once the route is back.
func TestRunDoesNotAckWhenTheResultIsNotConfirmed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ran := make(chan int, 100)
	var runs atomic.Int64
	rw := b.start(t, worker.Config{}, map[string]worker.HandlerFunc{
		taskType: func(ctx context.Context, task worker.Task) (any, error) {
			ran <- int(runs.Add(1))
			return square(ctx, task)
		},
	})
	// Run declares the topology, bindings included: unbind only once a
	// first task shows it is consuming.
	b.publishTask(t, taskType, "job-j", 1, `{"x": 1}`, nil)
	rw.expect(t, worker.EventCompleted)
	recv(t, ran, "warm-up run")
	runs.Store(0)
	b.result(t)
	ch, err := b.admin.Channel()
	require.NoError(t, err)
	defer func() { _ = ch.Close() }()
	require.NoError(t, ch.QueueUnbind(b.names.ResultsQueue, protocol.RoutingKeyResult, b.names.ResultsExchange, nil))

	b.publishTask(t, taskType, "job-j", 9, `{"x": 9}`, retries(3))

	recv(t, ran, "first run")
	ev := rw.expect(t, worker.EventPublishFailed)[0]
	require.Equal(t, "job-j", ev.JobID)
	require.ErrorContains(t, ev.Err, "unroutable")
	recv(t, ran, "second run")
	require.NoError(t, ch.QueueBind(b.names.ResultsQueue, protocol.RoutingKeyResult, b.names.ResultsExchange, false, nil))

	for {
		ev := recv(t, rw.events, "completed event")
		if ev.Kind == worker.EventCompleted {
			require.Equal(t, 1, ev.Attempt, "a requeue is not a retry")
			break
		}
		require.Equal(t, worker.EventPublishFailed, ev.Kind)
	}
	r, _ := b.result(t)
	require.Equal(t, "job-j", r.JobID)
	require.EqualValues(t, 9, r.TaskID)
	require.Equal(t, protocol.StatusCompleted, r.Status)
	require.Equal(t, 1, r.Attempt)
	require.JSONEq(t, `{"square": 81}`, string(r.Result))

	require.NoError(t, rw.stop())
	require.GreaterOrEqual(t, runs.Load(), int64(2))
	require.Zero(t, b.depth(t, b.names.ResultsQueue), "exactly one result")
	require.Zero(t, b.depth(t, b.names.TasksQueue))
	require.Zero(t, b.depth(t, b.names.TasksDLQ))
}

// Deleting the work queue cancels the consumer: the worker reconnects,
// declares the queue again and carries on.
func TestRunRedeclaresADeletedWorkQueueAndCarriesOn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rw := b.start(t, worker.Config{}, map[string]worker.HandlerFunc{taskType: square})
	b.publishTask(t, taskType, "job-k", 1, `{"x": 1}`, nil)
	rw.expect(t, worker.EventCompleted) // it is consuming

	ch, err := b.admin.Channel()
	require.NoError(t, err)
	defer func() { _ = ch.Close() }()
	_, err = ch.QueueDelete(b.names.TasksQueue, false, false, false)
	require.NoError(t, err)

	lost := rw.expect(t, worker.EventConnectionLost, worker.EventReconnected)[0]
	require.ErrorIs(t, lost.Err, worker.ErrConnectionLost)
	b.publishTask(t, taskType, "job-k", 2, `{"x": 2}`, nil)
	require.EqualValues(t, 2, rw.expect(t, worker.EventCompleted)[0].TaskID)
	require.NoError(t, rw.stop())
	for i := 1; i <= 2; i++ {
		r, _ := b.result(t)
		require.EqualValues(t, i, r.TaskID)
	}
}

func requireDeadLetter(t *testing.T, d amqp.Delivery, reason, errText, workerName string) {
	t.Helper()
	require.Equal(t, reason, d.Headers[protocol.HeaderReason])
	require.Contains(t, d.Headers[protocol.HeaderError], errText)
	require.Equal(t, workerName, d.Headers[protocol.HeaderWorker])
	failedAt, ok := d.Headers[protocol.HeaderFailedAt].(string)
	require.True(t, ok, "%s is %T", protocol.HeaderFailedAt, d.Headers[protocol.HeaderFailedAt])
	at, err := time.Parse(time.RFC3339, failedAt)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), at, time.Minute)
	require.Equal(t, amqp.Persistent, d.DeliveryMode)
}

func repeat[T any](v T, n int) []T {
	s := make([]T, n)
	for i := range s {
		s[i] = v
	}
	return s
}
