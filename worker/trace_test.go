package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenhq/warren/internal/spans"
	"github.com/warrenhq/warren/internal/wire"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/worker"
)

// relaySpan is the span that "published" the tests' traced task messages.
const relaySpan = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// tracedTask is the headers of a first run of a task published in
// relaySpan's trace.
func tracedTask() map[string]any {
	h := retries(3)
	h[protocol.HeaderTraceParent] = relaySpan
	return h
}

// endedSpans is a span processor that hands each ended span to the test.
type endedSpans chan sdktrace.ReadOnlySpan

func (c endedSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (c endedSpans) OnEnd(s sdktrace.ReadOnlySpan)                   { c <- s }
func (c endedSpans) Shutdown(context.Context) error                  { return nil }
func (c endedSpans) ForceFlush(context.Context) error                { return nil }

// take waits for n ended spans and returns them by name and, for
// process spans, attempt ("warren.task.process 2").
func (c endedSpans) take(t *testing.T, n int) map[string]sdktrace.ReadOnlySpan {
	t.Helper()
	got := map[string]sdktrace.ReadOnlySpan{}
	for range n {
		s := recv(t, c, "an ended span")
		name := s.Name()
		if name == spans.TaskProcess {
			name += " " + attrOf(t, s.Attributes(), spans.Attempt).String()
		}
		require.NotContains(t, got, name)
		got[name] = s
	}
	return got
}

// A task message's warren.task.process span continues the trace of its
// traceparent and is the span of the handler's context; a retried run is
// a child of the run before (the retry carries its context), and the
// result message carries its warren.result.publish span's, a child of the
// run that completed the task.
func TestRunTracesATaskThroughARetry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ended := make(endedSpans, 16)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(ended))
	var (
		runs     atomic.Int64
		handlers = make(chan trace.SpanContext, 2)
	)
	rw := b.start(t, worker.Config{TracerProvider: tp}, map[string]worker.HandlerFunc{
		taskType: func(ctx context.Context, _ worker.Task) (any, error) {
			handlers <- trace.SpanContextFromContext(ctx)
			if runs.Add(1) == 1 {
				return nil, errors.New("not yet")
			}
			return 4, nil
		},
	})
	b.publishTask(t, taskType, "job-t", 1, `2`, tracedTask())
	rw.expect(t, worker.EventRetried, worker.EventCompleted)

	parent := spans.Context{Parent: relaySpan}.SpanContext()
	got := ended.take(t, 3)
	first, second, result := got[spans.TaskProcess+" 1"], got[spans.TaskProcess+" 2"], got[spans.ResultPublish]
	require.NotNil(t, first)
	require.NotNil(t, second)
	require.NotNil(t, result)
	require.Equal(t, parent.TraceID(), first.SpanContext().TraceID(), "in the trace of the task message")
	require.Equal(t, parent.SpanID(), first.Parent().SpanID(), "a child of the span that published it")
	require.Equal(t, trace.SpanKindConsumer, first.SpanKind())
	require.Equal(t, "Error", first.Status().Code.String(), "the run failed")
	require.Equal(t, "not yet", first.Status().Description)
	require.True(t, recv(t, handlers, "first run").Equal(first.SpanContext()), "the handler's context holds the span")

	require.Equal(t, first.SpanContext().SpanID(), second.Parent().SpanID(), "the retry continues from the failed run")
	require.True(t, recv(t, handlers, "second run").Equal(second.SpanContext()))
	require.Equal(t, second.SpanContext().SpanID(), result.Parent().SpanID())
	require.Equal(t, trace.SpanKindProducer, result.SpanKind())

	_, d := b.result(t)
	carried := wire.Trace(d)
	require.Equal(t, result.SpanContext().TraceID(), carried.TraceID(), "the result message carries its span's context")
	require.Equal(t, result.SpanContext().SpanID(), carried.SpanID())
}

// Without tracing (no SDK), the handler's context still holds the trace
// context the task message came with, and the dead letter passes it on
// unchanged.
func TestRunWithoutTracingPassesTheTraceOn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	handler := make(chan trace.SpanContext, 1)
	rw := b.start(t, worker.Config{}, map[string]worker.HandlerFunc{
		taskType: func(ctx context.Context, _ worker.Task) (any, error) {
			handler <- trace.SpanContextFromContext(ctx)
			return nil, worker.Permanent(errors.New("bad input"))
		},
	})
	b.publishTask(t, taskType, "job-u", 1, `{}`, tracedTask())
	rw.expect(t, worker.EventDeadLettered)
	got := recv(t, handler, "handler run")
	require.Equal(t, relaySpan, "00-"+got.TraceID().String()+"-"+got.SpanID().String()+"-01")
	for _, q := range []string{b.names.TasksDLQ, b.names.DeadQueue} {
		require.Equal(t, relaySpan, b.get(t, q).Headers[protocol.HeaderTraceParent], q)
	}
}

// attrOf is the value of key in attrs; the test fails when it has none.
func attrOf(t *testing.T, attrs []attribute.KeyValue, key attribute.Key) attribute.Value {
	t.Helper()
	for _, kv := range attrs {
		if kv.Key == key {
			return kv.Value
		}
	}
	require.Failf(t, "missing attribute", "no attribute %s", key)
	return attribute.Value{}
}
