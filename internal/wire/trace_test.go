package wire_test

import (
	"encoding/json"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenhq/warren/internal/wire"
	"github.com/warrenhq/warren/protocol"
)

// spanContext is a sampled span context with a trace state.
func spanContext(t *testing.T) trace.SpanContext {
	t.Helper()
	tid, err := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	require.NoError(t, err)
	sid, err := trace.SpanIDFromHex("b7ad6b7169203331")
	require.NoError(t, err)
	ts, err := trace.ParseTraceState("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
	require.NoError(t, err)
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts})
}

// The trace context goes in the W3C headers of docs/protocol.md, comes
// back as the remote span context it was, and travels on the copies that
// settle the tasks (retry, dead letter, split), which keep the headers.
func TestTraceTravelsInTheHeaders(t *testing.T) {
	t.Parallel()
	sc := spanContext(t)
	out, err := wire.Tasks(names, wire.TaskMessage{JobID: "job", Type: "echo", MaxRetries: 2,
		Tasks: []protocol.BatchTask{{TaskID: 1}, {TaskID: 2}}})
	require.NoError(t, err)
	require.NotContains(t, out.Msg.Headers, protocol.HeaderTraceParent, "no trace context unless it is set")
	wire.SetTrace(&out.Msg, sc)
	require.Equal(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", out.Msg.Headers[protocol.HeaderTraceParent])
	require.Equal(t, "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7", out.Msg.Headers[protocol.HeaderTraceState])

	d := amqp.Delivery{Headers: out.Msg.Headers, Body: out.Msg.Body, MessageId: out.Msg.MessageId}
	m := wire.ReadTask(d)
	require.NoError(t, m.Malformed)
	require.True(t, m.Trace.IsRemote(), "it was published by another process")
	require.True(t, m.Trace.Equal(sc.WithRemote(true)), "got %v", m.Trace)
	require.True(t, wire.Trace(d).Equal(m.Trace))

	for name, c := range map[string]wire.Outbound{
		"retry":       m.Retry(names, m.Tasks[0], time.Second),
		"dead letter": m.DeadLetter(names, m.Tasks[1], wire.Failure{Reason: protocol.ReasonPermanent, Error: "no", FailedAt: time.Now()}),
		"split":       m.Split(m.Tasks[1]),
	} {
		require.Equal(t, out.Msg.Headers[protocol.HeaderTraceParent], c.Msg.Headers[protocol.HeaderTraceParent], name)
		require.Equal(t, out.Msg.Headers[protocol.HeaderTraceState], c.Msg.Headers[protocol.HeaderTraceState], name)
	}
}

// A result message, built without headers of its own, takes the trace
// context it is given; a new span context replaces the message's, trace
// state included; an invalid one changes nothing.
func TestSetTrace(t *testing.T) {
	t.Parallel()
	m := wire.ReadTask(taskDelivery(`{"job_id":"job","task_id":1}`, 0, 3))
	result, err := m.Results(names, []protocol.Result{{JobID: "job", TaskID: 1, Result: json.RawMessage(`1`)}})
	require.NoError(t, err)
	require.Nil(t, result.Msg.Headers, "a task without a generation has a result without headers")
	wire.SetTrace(&result.Msg, trace.SpanContext{})
	require.Nil(t, result.Msg.Headers, "an invalid span context sets nothing")

	sc := spanContext(t)
	wire.SetTrace(&result.Msg, sc)
	require.True(t, wire.Trace(amqp.Delivery{Headers: result.Msg.Headers}).Equal(sc.WithRemote(true)), "as the aggregator reads it")

	sid, err := trace.SpanIDFromHex("00f067aa0ba902b7")
	require.NoError(t, err)
	child := trace.NewSpanContext(trace.SpanContextConfig{TraceID: sc.TraceID(), SpanID: sid})
	wire.SetTrace(&result.Msg, child)
	require.Equal(t, amqp.Table{protocol.HeaderTraceParent: "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-00"},
		result.Msg.Headers, "the new context replaces the old one, trace state and all")
}

// A message without trace context, or with trace context that is not
// valid, is read as any other, outside any trace: never an error.
func TestMalformedTraceIsIgnored(t *testing.T) {
	t.Parallel()
	body := `{"job_id":"job","task_id":1}`
	for name, headers := range map[string]amqp.Table{
		"no headers":        nil,
		"no trace headers":  {protocol.HeaderRetry: int64(1)},
		"empty":             {protocol.HeaderTraceParent: ""},
		"not hex":           {protocol.HeaderTraceParent: "00-0af7651916cd43dd8448eb211c80319z-b7ad6b7169203331-01"},
		"too short":         {protocol.HeaderTraceParent: "00-0af7651916cd43dd-b7ad6b7169203331-01"},
		"zero trace id":     {protocol.HeaderTraceParent: "00-00000000000000000000000000000000-b7ad6b7169203331-01"},
		"zero span id":      {protocol.HeaderTraceParent: "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01"},
		"version ff":        {protocol.HeaderTraceParent: "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		"garbage":           {protocol.HeaderTraceParent: "not a traceparent at all", protocol.HeaderTraceState: "=,=,"},
		"not a string":      {protocol.HeaderTraceParent: int64(7)},
		"bytes":             {protocol.HeaderTraceParent: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")},
		"state without one": {protocol.HeaderTraceState: "congo=t61rcWkgMzE"},
	} {
		d := amqp.Delivery{Headers: headers, Body: []byte(body), MessageId: "job:1", Type: "echo"}
		m := wire.ReadTask(d)
		require.NoError(t, m.Malformed, name)
		require.Len(t, m.Tasks, 1, name)
		require.False(t, m.Trace.IsValid(), "%s: %v", name, m.Trace)
		require.False(t, wire.Trace(d).IsValid(), name)
	}
}
