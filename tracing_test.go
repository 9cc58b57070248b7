package warren_test

// OpenTelemetry tracing end to end: one job is one trace, from the API
// call through the relay, RabbitMQ, a worker and its handler, and the
// result back to the aggregator and the job's close.

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/spans"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/worker"
)

// handlerSpan is the span the test's handler starts from its context.
const handlerSpan = "test.handler.child"

// spanWaiter is a span processor that tells the test when the spans it
// waits for have ended, so that it reads the exporter only then.
type spanWaiter struct {
	mu    sync.Mutex
	ended map[string]int
	want  map[string]int
	done  chan struct{}
}

func (w *spanWaiter) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

func (w *spanWaiter) OnEnd(s sdktrace.ReadOnlySpan) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ended[s.Name()]++
	for name, n := range w.want {
		if w.ended[name] < n {
			return
		}
	}
	if w.want != nil {
		close(w.done)
		w.want = nil
	}
}

func (w *spanWaiter) Shutdown(context.Context) error   { return nil }
func (w *spanWaiter) ForceFlush(context.Context) error { return nil }

// The trace of one job: the API's server span continues the client's
// traceparent, and every span of the job, in the server, the worker and
// the handler, is in that trace, each the child of the step before it.
func TestOneJobIsOneTrace(t *testing.T) {
	t.Parallel()
	b := setup(t, "sqlite")
	// The close must be the one the recording asked for, in its trace: a
	// periodic scan that finds the job ready first (a loaded machine
	// between the commit and the request) closes it outside any trace.
	b.closeScanInterval = time.Hour
	exporter := tracetest.NewInMemoryExporter()
	names := []string{spans.Submit, spans.JobCreate, spans.RelayPublish, spans.TaskProcess, handlerSpan,
		spans.ResultPublish, spans.Aggregate, spans.JobClose}
	waiter := &spanWaiter{ended: map[string]int{}, want: map[string]int{}, done: make(chan struct{})}
	for _, name := range names {
		waiter.want[name] = 1
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter), sdktrace.WithSpanProcessor(waiter))
	b.tracerProvider = tp
	srv := b.startServer(t, b.store)

	cfg := b.workerConfig(2)
	cfg.TracerProvider = tp
	w, err := worker.New(cfg)
	require.NoError(t, err)
	w.Handle("double", func(ctx context.Context, tk worker.Task) (any, error) {
		// User code: a span of its own, from the handler's context.
		_, span := tp.Tracer("test").Start(ctx, handlerSpan)
		defer span.End()
		var p struct{ N int }
		if err := json.Unmarshal(tk.Payload, &p); err != nil {
			return nil, worker.Permanent(err)
		}
		return 2 * p.N, nil
	})
	runWorker(t, w)

	const (
		clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
		clientSpan  = "00f067aa0ba902b7"
	)
	req, err := http.NewRequest(http.MethodPost, srv.URL()+"/v1/jobs",
		strings.NewReader(`{"type": "double", "reduce": "collect", "tasks": [{"n": 21}]}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(protocol.HeaderTraceParent, "00-"+clientTrace+"-"+clientSpan+"-01")
	req.Header.Set(protocol.HeaderTraceState, "client=1")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	var submitted struct{ ID string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&submitted))
	require.Equal(t, warren.JobCompleted, b.waitClosed(t, submitted.ID))
	result, err := b.store.JobResult(context.Background(), submitted.ID)
	require.NoError(t, err)
	require.JSONEq(t, `[42]`, string(result))
	select {
	case <-waiter.done:
	case <-time.After(waitTimeout):
		t.Fatalf("the job's spans did not all end: %v", waiter.ended)
	}

	got := map[string]tracetest.SpanStub{}
	for _, s := range exporter.GetSpans() {
		_, seen := got[s.Name]
		require.False(t, seen, "one %s span for one task", s.Name)
		got[s.Name] = s
	}
	for _, name := range names {
		require.Contains(t, got, name)
		require.Equal(t, clientTrace, got[name].SpanContext.TraceID().String(), "%s is in the client's trace", name)
	}

	api := got[spans.Submit]
	require.Equal(t, trace.SpanKindServer, api.SpanKind)
	require.Equal(t, clientSpan, api.Parent.SpanID().String(), "the API's span continues the client's")
	require.True(t, api.Parent.IsRemote())
	require.Equal(t, "client=1", api.SpanContext.TraceState().String(), "the trace state comes along")
	require.Equal(t, int64(http.StatusAccepted), attr(t, api, "http.response.status_code").AsInt64())
	requireParent(t, got, spans.JobCreate, spans.Submit)
	requireParent(t, got, spans.RelayPublish, spans.Submit)
	requireParent(t, got, spans.TaskProcess, spans.RelayPublish)
	requireParent(t, got, handlerSpan, spans.TaskProcess)
	requireParent(t, got, spans.ResultPublish, spans.TaskProcess)
	requireParent(t, got, spans.Aggregate, spans.ResultPublish)
	requireParent(t, got, spans.JobClose, spans.Aggregate)
	require.True(t, got[spans.RelayPublish].Parent.IsRemote(), "the relay continues the context the job kept in the store")
	require.True(t, got[spans.TaskProcess].Parent.IsRemote(), "the worker continues the task message's context")
	require.True(t, got[spans.Aggregate].Parent.IsRemote(), "the aggregator continues the result message's context")

	for _, name := range []string{spans.Submit, spans.JobCreate, spans.RelayPublish, spans.TaskProcess,
		spans.ResultPublish, spans.Aggregate, spans.JobClose} {
		require.Equal(t, submitted.ID, attr(t, got[name], spans.JobID).AsString(), "%s names the job", name)
	}
	for _, name := range []string{spans.RelayPublish, spans.TaskProcess} {
		require.Equal(t, int64(1), attr(t, got[name], spans.TaskID).AsInt64(), "%s names the task", name)
		require.Equal(t, "double", attr(t, got[name], spans.JobType).AsString())
	}
	for _, name := range []string{spans.RelayPublish, spans.TaskProcess, spans.ResultPublish, spans.Aggregate} {
		require.Equal(t, "rabbitmq", attr(t, got[name], spans.MessagingSystem).AsString(), name)
	}
	require.Equal(t, trace.SpanKindProducer, got[spans.RelayPublish].SpanKind)
	require.Equal(t, trace.SpanKindConsumer, got[spans.TaskProcess].SpanKind)
	require.Equal(t, trace.SpanKindProducer, got[spans.ResultPublish].SpanKind)
	require.Equal(t, trace.SpanKindConsumer, got[spans.Aggregate].SpanKind)
	require.Equal(t, string(warren.JobCompleted), attr(t, got[spans.JobClose], spans.JobState).AsString())
}

// requireParent checks that span child is a child of span parent.
func requireParent(t *testing.T, got map[string]tracetest.SpanStub, child, parent string) {
	t.Helper()
	require.Equal(t, got[parent].SpanContext.SpanID(), got[child].Parent.SpanID(), "%s is a child of %s", child, parent)
}

// attr is span s's attribute key; the test fails when it has none.
func attr(t *testing.T, s tracetest.SpanStub, key attribute.Key) attribute.Value {
	t.Helper()
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value
		}
	}
	require.Failf(t, "missing attribute", "span %s has no attribute %s", s.Name, key)
	return attribute.Value{}
}
