// Package spans is what warren's components share to make OpenTelemetry
// spans: the instrumentation scope, the span names, the attribute keys,
// and the trace context a job keeps in the store. It uses the
// OpenTelemetry API only, so that the worker can use it without linking
// the SDK: installing an SDK and an exporter is the program's business
// (internal/tracing, for cmd/warren). With no SDK installed every span is
// a no-op.
package spans

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenhq/warren/protocol"
)

// Scope is the instrumentation scope of every warren span.
const Scope = "github.com/warrenhq/warren"

// The names of warren's spans, in the order a job meets them.
const (
	// Submit is the API's server span of a submission.
	Submit = "POST /v1/jobs"
	// JobCreate is the store write of a submission.
	JobCreate = "warren.job.create"
	// RelayPublish is the relay's publishing of one task message.
	RelayPublish = "warren.relay.publish"
	// TaskProcess is a worker's processing of one task message, handler
	// included.
	TaskProcess = "warren.task.process"
	// ResultPublish is a worker's publishing of one result message.
	ResultPublish = "warren.result.publish"
	// Aggregate is the aggregator's recording of one job's outcomes of a
	// batch.
	Aggregate = "warren.aggregate"
	// JobClose is the aggregator's close of a job.
	JobClose = "warren.job.close"
)

// Attribute keys of warren's spans. The messaging ones are OpenTelemetry's
// semantic conventions.
const (
	JobID      = attribute.Key("warren.job_id")
	JobType    = attribute.Key("warren.job_type")
	TaskID     = attribute.Key("warren.task_id")
	TaskIDs    = attribute.Key("warren.task_ids")
	TaskCount  = attribute.Key("warren.task_count")
	Attempt    = attribute.Key("warren.attempt")
	Generation = attribute.Key("warren.generation")
	JobState   = attribute.Key("warren.job_state")
	Outcomes   = attribute.Key("warren.outcomes")

	MessagingSystem         = attribute.Key("messaging.system")
	MessagingOperationType  = attribute.Key("messaging.operation.type")
	MessagingOperationName  = attribute.Key("messaging.operation.name")
	MessagingDestination    = attribute.Key("messaging.destination.name")
	MessagingRoutingKey     = attribute.Key("messaging.rabbitmq.destination.routing_key")
	MessagingMessageID      = attribute.Key("messaging.message.id")
	MessagingConversationID = attribute.Key("messaging.message.conversation_id")
	MessagingBatchCount     = attribute.Key("messaging.batch.message_count")
	MessagingBodySize       = attribute.Key("messaging.message.body.size")
)

// RabbitMQ is the messaging.system attribute of every messaging span.
var RabbitMQ = MessagingSystem.String("rabbitmq")

// Tracer returns warren's tracer of tp, or of otel.GetTracerProvider()
// when tp is nil.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(Scope)
}

// Tasks returns the attributes naming tasks of job jobID: warren.task_id
// for one, warren.task_ids and warren.task_count for more.
func Tasks(jobID string, ids []int64) []attribute.KeyValue {
	attrs := []attribute.KeyValue{JobID.String(jobID)}
	if len(ids) == 1 {
		return append(attrs, TaskID.Int64(ids[0]))
	}
	return append(attrs, TaskIDs.Int64Slice(ids), TaskCount.Int(len(ids)))
}

// Fail records err on span and sets its status to Error with err's text;
// a nil err, or a nil span, does nothing.
func Fail(span trace.Span, err error) {
	if err == nil || span == nil || !span.IsRecording() {
		return
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}

// traceContext is the W3C trace context propagator: warren carries trace
// context in the W3C headers whatever the program's global propagator.
var traceContext = propagation.TraceContext{}

// Context is a job's trace context as the store keeps it: the W3C
// traceparent and tracestate of the span that submitted it, "" when it
// was submitted outside any trace.
type Context struct {
	Parent, State string
}

// Save returns the trace context of the span in ctx, to keep with a job;
// the zero Context when ctx has none.
func Save(ctx context.Context) Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return Context{}
	}
	c := propagation.MapCarrier{}
	traceContext.Inject(ctx, c)
	return Context{Parent: c[protocol.HeaderTraceParent], State: c[protocol.HeaderTraceState]}
}

// SpanContext returns the remote span context c holds; an invalid one
// when it holds none or is not valid trace context.
func (c Context) SpanContext() trace.SpanContext {
	if c.Parent == "" {
		return trace.SpanContext{}
	}
	carrier := propagation.MapCarrier{protocol.HeaderTraceParent: c.Parent}
	if c.State != "" {
		carrier[protocol.HeaderTraceState] = c.State
	}
	return Extract(carrier)
}

// FromHeaders reads the W3C trace context from HTTP headers (or anything
// with their Get): ctx with the remote span context it holds, or ctx as
// it is when it holds none or is not valid trace context.
func FromHeaders(ctx context.Context, h propagation.TextMapCarrier) context.Context {
	if h.Get(protocol.HeaderTraceParent) == "" {
		return ctx
	}
	return traceContext.Extract(ctx, h)
}

// Inject writes the trace context of sc to carrier: nothing when sc is
// not valid.
func Inject(sc trace.SpanContext, carrier propagation.TextMapCarrier) {
	if !sc.IsValid() {
		return
	}
	traceContext.Inject(trace.ContextWithSpanContext(context.Background(), sc), carrier)
}

// Extract returns the remote span context carrier holds; an invalid one
// when it holds none or is not valid trace context.
func Extract(carrier propagation.TextMapCarrier) trace.SpanContext {
	if carrier.Get(protocol.HeaderTraceParent) == "" {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(traceContext.Extract(context.Background(), carrier))
}
