package workertest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/worker"
	"github.com/warrenhq/warren/worker/workertest"
)

// parityTask is one task the parity test sends to a real worker.
type parityTask struct {
	typ, payload string
	maxRetries   int
	runs         int           // events the worker reports for it: one per run
	timeout      time.Duration // its x-task-timeout, if any
}

// TestWorkertestAgreesWithTheWorker runs tasks through a real worker on
// RabbitMQ and, for every run the worker reports, the same task and
// attempt through RunWorker on the same *worker.Worker: the action,
// reason, retry delay, error text and result must be the worker's.
func TestWorkertestAgreesWithTheWorker(t *testing.T) {
	t.Parallel()
	tiers := []time.Duration{10 * time.Millisecond, 20 * time.Millisecond} // retries come back at once
	names, admin := amqptest.Topology(t, &broker.TopologyOptions{RetryTiers: tiers})
	events := make(chan worker.Event, 100)
	up := make(chan struct{})
	var unserved sync.Map // the tasks that bounced once: RunWorker tells only of the first

	w, err := worker.New(worker.Config{
		AMQPURL: amqptest.URL(), Prefix: names.Prefix, RetryTiers: tiers, Name: "parity",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnEvent: func(ev worker.Event) {
			if ev.Kind == worker.EventConnected {
				close(up)
				return
			}
			if ev.Kind == worker.EventStarted || ev.Kind == worker.EventDone {
				return
			}
			if ev.Kind == worker.EventUnserved {
				if _, again := unserved.LoadOrStore(ev.TaskID, true); again {
					return
				}
			}
			events <- ev
		},
	})
	require.NoError(t, err)
	registerParityHandlers(w)
	runInBackground(t, w)
	select {
	case <-up:
	case <-time.After(waitTimeout):
		t.Fatal("the worker did not connect")
	}

	tasks := []parityTask{
		{"echo", `{"a":1}`, 3, 1, 0},
		{"permanent", `1`, 3, 1, 0},
		{"flaky", `1`, 2, 3, 0}, // retried twice, one tier each, then dead-lettered
		{"panics", `1`, 0, 1, 0},
		{"unmarshalable", `1`, 3, 1, 0},
		{"typed", `{"n":2}`, 3, 1, 0},
		{"typed", `{"n":"two"}`, 3, 1, 0},
		{"batch", `1`, 3, 1, 0},
		{"batch-panics", `1`, 1, 2, 0},
		{"no-such-type", `1`, 3, 1, 0},
		{"slow", `1`, 1, 2, 50 * time.Millisecond},       // past its timeout: retried once, then dead-lettered
		{"batch-slow", `1`, 1, 2, 50 * time.Millisecond}, // the same, through a batch handler
		{"echo", `{"b":2}`, 3, 1, time.Minute},           // within its timeout
	}
	pub, err := broker.NewPublisher(amqptest.Dial(t), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	runs := 0
	for i, tc := range tasks {
		publishTask(t, pub, names, tc, int64(i+1))
		runs += tc.runs
	}

	completed := map[int64]json.RawMessage{} // RunWorker's outputs by task
	// An unserved task comes back after its first tier and bounces
	// again (a later tier) for as long as the test runs: only its first
	// bounce is compared, which is RunWorker's answer.
	bounced := map[int64]bool{}
	for seen := 0; seen < runs; {
		var ev worker.Event
		select {
		case ev = <-events:
		case <-time.After(waitTimeout):
			t.Fatalf("the worker reported %d of %d runs within %v", seen, runs, waitTimeout)
		}
		if ev.Kind == worker.EventUnserved {
			if bounced[ev.TaskID] {
				continue
			}
			bounced[ev.TaskID] = true
		}
		seen++
		tc := tasks[ev.TaskID-1]
		maxRetries := tc.maxRetries
		if maxRetries == 0 {
			maxRetries = workertest.NoRetries
		}
		res := workertest.RunWorker(context.Background(), w, worker.Task{JobID: ev.JobID, TaskID: ev.TaskID, Type: ev.Type,
			Attempt: ev.Attempt, MaxRetries: maxRetries, Timeout: tc.timeout, Payload: json.RawMessage(tc.payload)}, nil)
		what := fmt.Sprintf("task %d (%s), attempt %d", ev.TaskID, tc.typ, ev.Attempt)
		require.Equal(t, ev.Kind, eventKind(res.Action), "%s: worker %+v, workertest %+v", what, ev, res)
		require.Equal(t, ev.Reason, res.Reason, what)
		require.Equal(t, ev.Delay, res.Delay, what)
		require.Equal(t, errText(ev.Err), errText(res.Err), what)
		if res.Action == workertest.Completed {
			completed[ev.TaskID] = res.Output
		}
	}
	require.Len(t, completed, 4, "echo (twice, once within a timeout), typed and batch complete")
	for range completed {
		r := getResult(t, admin, names.ResultsQueue)
		require.Equal(t, string(completed[r.TaskID]), string(r.Result), "the result of task %d", r.TaskID)
	}
}

func registerParityHandlers(w *worker.Worker) {
	w.Handle("echo", echo).
		Handle("permanent", func(context.Context, worker.Task) (any, error) {
			return nil, worker.Permanent(errors.New("no such image"))
		}).
		Handle("flaky", flaky).
		Handle("panics", func(context.Context, worker.Task) (any, error) { panic("nil map") }).
		Handle("unmarshalable", func(context.Context, worker.Task) (any, error) { return make(chan int), nil }).
		Handle("typed", worker.Typed(func(_ context.Context, _ worker.Task, in struct{ N int }) (int, error) {
			return in.N * in.N, nil
		})).
		HandleBatch("batch", func(_ context.Context, ts []worker.Task) []worker.Outcome {
			return []worker.Outcome{{Value: map[string]int{"tasks": len(ts)}}}
		}).
		HandleBatch("batch-panics", func(context.Context, []worker.Task) []worker.Outcome { panic("index out of range") }).
		Handle("slow", untilDone).
		HandleBatch("batch-slow", func(ctx context.Context, ts []worker.Task) []worker.Outcome {
			v, err := untilDone(ctx, ts[0])
			return []worker.Outcome{{Value: v, Err: err}}
		})
}

// waitTimeout bounds every wait on the worker; a test that hits it fails.
const waitTimeout = 15 * time.Second

// runInBackground runs w until the test ends.
func runInBackground(t *testing.T, w *worker.Worker) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(waitTimeout):
			t.Error("Run did not return after its context was cancelled")
		}
	})
}

// publishTask publishes task taskID of job "parity" as the relay does, on
// its first run.
func publishTask(t *testing.T, pub *broker.Publisher, names protocol.Names, tc parityTask, taskID int64) {
	t.Helper()
	body, err := protocol.EncodeTask(protocol.Task{JobID: "parity", TaskID: taskID, Payload: json.RawMessage(tc.payload)})
	require.NoError(t, err)
	headers := amqp.Table{protocol.HeaderRetry: int64(0), protocol.HeaderMaxRetries: int64(tc.maxRetries)}
	if tc.timeout > 0 {
		headers[protocol.HeaderTaskTimeout] = tc.timeout.Milliseconds()
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	require.NoError(t, pub.PublishAndWait(ctx, names.JobsExchange, protocol.RoutingKeyTask, amqp.Publishing{
		ContentType:   protocol.ContentType,
		DeliveryMode:  amqp.Persistent,
		MessageId:     protocol.MessageID("parity", taskID),
		CorrelationId: "parity",
		Type:          tc.typ,
		Headers:       headers,
		Body:          body,
	}))
}

// getResult takes the next result from queue, which must have one.
func getResult(t *testing.T, admin *amqp.Connection, queue string) protocol.Result {
	t.Helper()
	ch, err := admin.Channel()
	require.NoError(t, err)
	defer func() { _ = ch.Close() }()
	d, ok, err := ch.Get(queue, true)
	require.NoError(t, err)
	require.True(t, ok, "queue %q is empty", queue)
	r, err := protocol.DecodeResult(d.Body)
	require.NoError(t, err)
	return r
}

// eventKind is the worker event that reports a run with action a.
func eventKind(a workertest.Action) worker.EventKind {
	switch a {
	case workertest.Completed:
		return worker.EventCompleted
	case workertest.Retried:
		return worker.EventRetried
	case workertest.Failed, workertest.DeadLettered:
		return worker.EventDeadLettered
	case workertest.Requeued:
		return worker.EventRequeued
	case workertest.Unserved:
		return worker.EventUnserved
	}
	return ""
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
