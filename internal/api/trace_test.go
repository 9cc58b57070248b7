package api_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenhq/warren/internal/api"
	"github.com/warrenhq/warren/internal/spans"
	"github.com/warrenhq/warren/store"
)

// tracedSetup is setup with an API whose spans go to the returned
// exporter (synchronously: they are there when the answer is).
func tracedSetup(t *testing.T) (*testBundle, *tracetest.InMemoryExporter) {
	t.Helper()
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	b := setup(t, &options{onNew: func(_ *testing.T, cfg *api.Config) { cfg.TracerProvider = tp }})
	return b, exporter
}

// tracedJob is the trace context the store kept with job id, as the relay
// reads it.
func tracedJob(t *testing.T, s store.Store, id string) spans.Context {
	t.Helper()
	var c spans.Context
	_, err := s.RelayBatch(context.Background(), 1, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		require.Len(t, tasks, 1)
		require.Equal(t, id, tasks[0].JobID)
		c = spans.Context{Parent: tasks[0].TraceParent, State: tasks[0].TraceState}
		return nil, nil
	})
	require.NoError(t, err)
	return c
}

// A submission's server span continues the request's traceparent; its
// store write is its child, and the job keeps the submission span's trace
// context for the relay.
func TestSubmitContinuesTheRequestsTrace(t *testing.T) {
	t.Parallel()
	b, exporter := tracedSetup(t)
	id := b.mustSubmit(t, `{"type": "echo", "tasks": [1]}`,
		"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate", "client=1")

	got := exporter.GetSpans()
	require.Len(t, got, 2)
	create, submit := got[0], got[1]
	require.Equal(t, spans.JobCreate, create.Name)
	require.Equal(t, spans.Submit, submit.Name)
	require.Equal(t, trace.SpanKindServer, submit.SpanKind)
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", submit.SpanContext.TraceID().String())
	require.Equal(t, "00f067aa0ba902b7", submit.Parent.SpanID().String())
	require.Equal(t, submit.SpanContext.SpanID(), create.Parent.SpanID())
	require.Contains(t, submit.Attributes, spans.JobID.String(id))
	require.Contains(t, create.Attributes, spans.JobID.String(id))

	kept := tracedJob(t, b.store, id)
	require.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-"+submit.SpanContext.SpanID().String()+"-01", kept.Parent)
	require.Equal(t, "client=1", kept.State)
}

// A malformed traceparent is ignored, never refused: the submission
// starts a trace of its own.
func TestSubmitIgnoresAMalformedTraceparent(t *testing.T) {
	t.Parallel()
	b, exporter := tracedSetup(t)
	id := b.mustSubmit(t, `{"type": "echo", "tasks": [1]}`, "traceparent", "00-not-a-trace-01")
	var submit tracetest.SpanStub
	for _, s := range exporter.GetSpans() {
		if s.Name == spans.Submit {
			submit = s
		}
	}
	require.True(t, submit.SpanContext.IsValid())
	require.False(t, submit.Parent.IsValid(), "a trace of its own")
	require.Equal(t, submit.SpanContext.TraceID(), tracedJob(t, b.store, id).SpanContext().TraceID())
}

// Without tracing, a submission outside any trace keeps no trace context:
// its task messages carry no trace headers.
func TestSubmitWithoutTracingKeepsNoTrace(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	id := b.mustSubmit(t, `{"type": "echo", "tasks": [1]}`)
	require.Equal(t, spans.Context{}, tracedJob(t, b.store, id))
	resp := b.submit(t, `{"type": "echo", "tasks": [1]}`, "traceparent", "garbage")
	require.Equal(t, http.StatusAccepted, resp.status)
}
