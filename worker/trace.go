package worker

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/warrenhq/warren/internal/spans"
	"github.com/warrenhq/warren/internal/wire"
)

// startProcess starts d's warren.task.process span: a child of the span
// that published its message (the relay's, from the message's
// traceparent header), or the root of a trace of its own when the message
// carries none. It ends when d is settled.
func (s *session) startProcess(d *delivery) trace.Span {
	ctx := context.Background()
	if d.msg.Trace.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, d.msg.Trace)
	}
	_, span := s.w.tracer.Start(ctx, spans.TaskProcess, trace.WithSpanKind(trace.SpanKindConsumer))
	if !span.IsRecording() {
		return span
	}
	ids := make([]int64, len(d.tasks))
	for i, t := range d.tasks {
		ids[i] = t.TaskID
	}
	span.SetAttributes(spans.Tasks(d.tasks[0].JobID, ids)...)
	span.SetAttributes(spans.JobType.String(d.msg.Type), spans.Attempt.Int(d.msg.Attempt()), spans.Generation.Int(d.msg.Generation),
		spans.RabbitMQ, spans.MessagingOperationType.String("process"), spans.MessagingOperationName.String("process"),
		spans.MessagingDestination.String(s.w.names.WorkQueue(d.msg.Queue)), spans.MessagingMessageID.String(d.raw.MessageId),
		spans.MessagingConversationID.String(d.raw.CorrelationId), spans.MessagingBodySize.Int(len(d.raw.Body)))
	if d.msg.Redelivered {
		span.AddEvent("redelivered")
	}
	return span
}

// handlerContext is the base of the context of d's handler calls: the
// handlers' context, carrying d's span, so that a handler's own spans
// (otel.Tracer(...).Start(ctx, ...)) are its children.
func (s *session) handlerContext(d *delivery) context.Context {
	if !d.span.IsRecording() && !d.span.SpanContext().IsValid() {
		return s.handlers
	}
	return trace.ContextWithSpan(s.handlers, d.span)
}

// traceCopies puts d's span in the trace context of outs, the retries and
// dead letters of d's tasks, so that the next run of a retried task, or
// the aggregator's recording of a dead-lettered one, continues from this
// run. Without a span of d's own, outs keep the context d carried.
func traceCopies(d *delivery, outs []wire.Outbound) {
	sc := d.span.SpanContext()
	for i := range outs {
		wire.SetTrace(&outs[i].Msg, sc)
	}
}

// startResults starts the warren.result.publish span of a result message
// that answers deliveries ds: a child of the first one's process span,
// linked to the others' (a result batch of single task messages answers
// several), and puts its trace context in outs, the message or the parts
// it was cut into, for the aggregator to continue.
func (s *session) startResults(ds []*delivery, outs []wire.Outbound) trace.Span {
	ctx := trace.ContextWithSpan(context.Background(), ds[0].span)
	_, span := s.w.tracer.Start(ctx, spans.ResultPublish, trace.WithSpanKind(trace.SpanKindProducer))
	for i := range outs {
		wire.SetTrace(&outs[i].Msg, span.SpanContext())
	}
	if !span.IsRecording() {
		return span
	}
	for _, d := range ds[1:] {
		if sc := d.span.SpanContext(); sc.IsValid() {
			span.AddLink(trace.Link{SpanContext: sc})
		}
	}
	span.SetAttributes(spans.JobID.String(ds[0].tasks[0].JobID), spans.RabbitMQ,
		spans.MessagingOperationType.String("send"), spans.MessagingOperationName.String("publish"),
		spans.MessagingDestination.String(s.w.names.ResultsExchange), spans.MessagingBatchCount.Int(len(outs)))
	if len(outs) > 0 {
		span.SetAttributes(spans.MessagingMessageID.String(outs[0].Msg.MessageId))
	}
	return span
}

// endSpan ends span, as failed with err when it is not nil.
func endSpan(span trace.Span, err error) {
	spans.Fail(span, err)
	span.End()
}
