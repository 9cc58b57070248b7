package relay_test

import (
	"context"
	"encoding/json"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/relay"
	"github.com/warrenhq/warren/internal/spans"
	"github.com/warrenhq/warren/internal/wire"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/store"
)

// submittedIn is the trace context a traced job is submitted in.
const submittedIn = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// createTraced creates a job of n echo tasks, sent in batches of batch,
// submitted in the trace context parent ("" for none).
func (b *testBundle) createTraced(t *testing.T, parent string, n, batch int) warren.Job {
	t.Helper()
	tasks := func(yield func(json.RawMessage, error) bool) {
		for range n {
			if !yield(json.RawMessage(`{}`), nil) {
				return
			}
		}
	}
	job, _, err := b.store.CreateJob(context.Background(),
		store.NewJob{Type: "echo", Policy: warren.Policy{BatchSize: batch}, TraceParent: parent}, tasks)
	require.NoError(t, err)
	return job
}

// relayAll publishes every pending task with a relay that makes its spans
// with tp (nil: the global provider) and returns the task messages, by
// job id.
func (b *testBundle) relayAll(t *testing.T, tp trace.TracerProvider, want int) map[string][]amqp.Delivery {
	t.Helper()
	r, err := relay.New(relay.Config{Store: b.store, Publisher: b.pub, Names: b.names, TracerProvider: tp})
	require.NoError(t, err)
	n, err := r.RelayOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, want, n)
	ch, err := b.conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	msgs := map[string][]amqp.Delivery{}
	for {
		d, ok, err := ch.Get(b.names.TasksQueue, true)
		require.NoError(t, err)
		if !ok {
			return msgs
		}
		msgs[d.CorrelationId] = append(msgs[d.CorrelationId], d)
	}
}

// Without tracing (no SDK installed), a job submitted outside any trace
// has task messages without trace headers, and one submitted in a trace
// has its trace context passed on as it came.
func TestRelayWithoutTracingAddsNoHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	untraced := b.createTraced(t, "", 2, 1)
	traced := b.createTraced(t, submittedIn, 1, 1)

	msgs := b.relayAll(t, nil, 3)
	require.Len(t, msgs[untraced.ID], 2)
	for _, d := range msgs[untraced.ID] {
		require.NotContains(t, d.Headers, protocol.HeaderTraceParent)
		require.NotContains(t, d.Headers, protocol.HeaderTraceState)
	}
	require.Len(t, msgs[traced.ID], 1)
	require.Equal(t, submittedIn, msgs[traced.ID][0].Headers[protocol.HeaderTraceParent])
}

// With tracing, each task message gets a warren.relay.publish span, a
// child of the span its job was submitted in (a span of a trace of its
// own for a job submitted outside any), whose context the message
// carries; a batch message has one span naming its tasks.
func TestRelayPublishSpans(t *testing.T) {
	t.Parallel()
	b := setup(t)
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	traced := b.createTraced(t, submittedIn, 3, 3)
	untraced := b.createTraced(t, "", 1, 1)

	msgs := b.relayAll(t, tp, 4)
	require.Len(t, msgs[traced.ID], 1, "one batch message")
	require.Len(t, msgs[untraced.ID], 1)
	got := exporter.GetSpans()
	require.Len(t, got, 2, "a span per message")
	byJob := map[string]tracetest.SpanStub{}
	for _, s := range got {
		require.Equal(t, spans.RelayPublish, s.Name)
		require.Equal(t, trace.SpanKindProducer, s.SpanKind)
		byJob[attr(t, s, spans.JobID).AsString()] = s
	}

	s := byJob[traced.ID]
	parent := spans.Context{Parent: submittedIn}.SpanContext()
	require.Equal(t, parent.TraceID(), s.SpanContext.TraceID(), "in the trace the job was submitted in")
	require.Equal(t, parent.SpanID(), s.Parent.SpanID(), "a child of the submission's span")
	require.True(t, s.Parent.IsRemote())
	require.Equal(t, []int64{1, 2, 3}, attr(t, s, spans.TaskIDs).AsInt64Slice())
	require.Equal(t, "echo", attr(t, s, spans.JobType).AsString())
	require.Equal(t, "rabbitmq", attr(t, s, spans.MessagingSystem).AsString())
	require.Equal(t, b.names.JobsExchange, attr(t, s, spans.MessagingDestination).AsString())
	carried := wire.Trace(msgs[traced.ID][0])
	require.Equal(t, s.SpanContext.TraceID(), carried.TraceID(), "the message carries the span's context")
	require.Equal(t, s.SpanContext.SpanID(), carried.SpanID())

	s = byJob[untraced.ID]
	require.False(t, s.Parent.IsValid(), "a job submitted outside any trace starts one")
	require.Equal(t, int64(1), attr(t, s, spans.TaskID).AsInt64())
	require.Equal(t, s.SpanContext.SpanID(), wire.Trace(msgs[untraced.ID][0]).SpanID())
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
