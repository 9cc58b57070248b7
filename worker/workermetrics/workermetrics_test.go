package workermetrics_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/worker"
	"github.com/warrenhq/warren/worker/workermetrics"
)

const waitTimeout = 15 * time.Second

// A real worker on the real broker: a task that completes, one that fails
// for good and one that is retried once move the counters by outcome and
// the handler histogram; a running handler is in flight, and none is
// once it returned.
func TestMetricsFollowARealWorker(t *testing.T) {
	t.Parallel()
	tiers := []time.Duration{10 * time.Millisecond}
	names, _ := amqptest.Topology(t, &broker.TopologyOptions{RetryTiers: tiers})
	pub, err := broker.NewPublisher(amqptest.Dial(t), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })

	reg := prometheus.NewRegistry()
	m, err := workermetrics.New(reg)
	require.NoError(t, err)
	events := make(chan worker.Event, 100)
	w, err := worker.New(worker.Config{
		AMQPURL: amqptest.URL(), Prefix: names.Prefix, RetryTiers: tiers, Name: "metrics-test",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnEvent: func(ev worker.Event) {
			m.Observe(ev)
			events <- ev
		},
	})
	require.NoError(t, err)
	release := make(chan struct{})
	running := make(chan struct{}, 1)
	w.Handle("work", func(_ context.Context, task worker.Task) (any, error) {
		var in struct{ Do string }
		if err := json.Unmarshal(task.Payload, &in); err != nil {
			return nil, worker.Permanent(err)
		}
		switch {
		case in.Do == "fail":
			return nil, worker.Permanent(errors.New("planned"))
		case in.Do == "retry" && task.Attempt == 1:
			return nil, errors.New("again")
		case in.Do == "hold":
			running <- struct{}{}
			<-release
		}
		return "ok", nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	publish := func(id int64, do string) {
		body, err := protocol.EncodeTask(protocol.Task{JobID: "job-m", TaskID: id, Payload: json.RawMessage(`{"do":"` + do + `"}`)})
		require.NoError(t, err)
		pctx, pcancel := context.WithTimeout(context.Background(), waitTimeout)
		defer pcancel()
		require.NoError(t, pub.PublishAndWait(pctx, names.JobsExchange, protocol.RoutingKeyTask, amqp.Publishing{
			ContentType: protocol.ContentType, DeliveryMode: amqp.Persistent, MessageId: protocol.MessageID("job-m", id),
			CorrelationId: "job-m", Type: "work", Body: body,
			Headers: amqp.Table{protocol.HeaderRetry: int64(0), protocol.HeaderMaxRetries: int64(3)},
		}))
	}
	publish(1, "ok")
	publish(2, "fail")
	publish(3, "retry")
	waitFor(t, events, map[worker.EventKind]int{worker.EventCompleted: 2, worker.EventDeadLettered: 1, worker.EventRetried: 1, worker.EventDone: 4})

	require.Equal(t, 2.0, taskCount(t, reg, "work", "completed"))
	require.Equal(t, 1.0, taskCount(t, reg, "work", "dead_lettered"))
	require.Equal(t, 1.0, taskCount(t, reg, "work", "retried"))
	require.Equal(t, uint64(4), histogramCount(t, reg, "warren_worker_handler_duration_seconds"), "one observation per handler run")
	require.Equal(t, 0.0, gauge(t, reg, "warren_worker_tasks_in_flight"))
	require.Equal(t, 1.0, gauge(t, reg, "warren_worker_connected"))

	publish(4, "hold")
	select {
	case <-running:
	case <-time.After(waitTimeout):
		t.Fatal("the held task never ran")
	}
	require.Equal(t, 1.0, gauge(t, reg, "warren_worker_tasks_in_flight"), "a running handler is in flight")
	close(release)
	waitFor(t, events, map[worker.EventKind]int{worker.EventDone: 1})
	require.Equal(t, 0.0, gauge(t, reg, "warren_worker_tasks_in_flight"))
	require.Equal(t, 3.0, taskCount(t, reg, "work", "completed"))
}

// Made-up task types beyond the bound share one label value.
func TestTypeLabelsAreBounded(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := workermetrics.New(reg)
	require.NoError(t, err)
	for i := range 300 {
		m.Observe(worker.Event{Kind: worker.EventDeadLettered, Type: "t" + string(rune('a'+i%26)) + string(rune('a'+i/26))})
	}
	m.Observe(worker.Event{Kind: worker.EventDeadLettered})
	n, err := testutil.GatherAndCount(reg, "warren_worker_tasks_total")
	require.NoError(t, err)
	require.Equal(t, 257, n, "256 types and %q", workermetrics.OtherType)
	require.Equal(t, 45.0, taskCount(t, reg, workermetrics.OtherType, "dead_lettered"))
}

// waitFor reads events until it has seen at least want of each kind.
func waitFor(t *testing.T, events <-chan worker.Event, want map[worker.EventKind]int) {
	t.Helper()
	seen := map[worker.EventKind]int{}
	deadline := time.After(waitTimeout)
	for {
		ok := true
		for k, n := range want {
			if seen[k] < n {
				ok = false
			}
		}
		if ok {
			return
		}
		select {
		case ev := <-events:
			seen[ev.Kind]++
		case <-deadline:
			t.Fatalf("events seen %v, want %v", seen, want)
		}
	}
}

func family(t *testing.T, reg *prometheus.Registry, name string) *dto.MetricFamily {
	t.Helper()
	fams, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() == name {
			return f
		}
	}
	t.Fatalf("no metric %s", name)
	return nil
}

// taskCount is warren_worker_tasks_total{type,outcome}.
func taskCount(t *testing.T, reg *prometheus.Registry, typ, outcome string) float64 {
	t.Helper()
	for _, m := range family(t, reg, "warren_worker_tasks_total").GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["type"] == typ && labels["outcome"] == outcome {
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	return family(t, reg, name).GetMetric()[0].GetGauge().GetValue()
}

func histogramCount(t *testing.T, reg *prometheus.Registry, name string) uint64 {
	t.Helper()
	var n uint64
	for _, m := range family(t, reg, name).GetMetric() {
		n += m.GetHistogram().GetSampleCount()
	}
	return n
}

// A task put back for want of a handler counts as unserved, by type.
func TestUnservedTasksAreCounted(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := workermetrics.New(reg)
	require.NoError(t, err)
	m.Observe(worker.Event{Kind: worker.EventUnserved, Type: "resize", Delay: time.Second})
	m.Observe(worker.Event{Kind: worker.EventUnserved, Type: "resize", Delay: 5 * time.Second})
	require.Equal(t, 2.0, taskCount(t, reg, "resize", "unserved"))
}
