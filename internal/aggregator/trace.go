package aggregator

import (
	"context"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/spans"
	"github.com/warrenhq/warren/store"
)

// tracer is the aggregator's tracer.
func (a *Aggregator) tracer() trace.Tracer { return spans.Tracer(a.cfg.TracerProvider) }

// batchSpans are the warren.aggregate spans of one batch: one per job
// with outcomes in it.
type batchSpans map[string]*jobSpan

// jobSpan is the warren.aggregate span of one job's outcomes in a batch.
// It is a child of the span that published the first of the job's
// messages in the batch (the worker's warren.result.publish, or, for a
// dead letter, the span its task message carries), and links to the
// others: one recording has one parent, and a batch may gather the
// outcomes of many messages, and so of many traces.
type jobSpan struct {
	span       trace.Span
	parent     trace.SpanContext
	last       int // the batch index of the job's last message
	outcomes   int
	deliveries int
}

// startSpans starts the warren.aggregate span of each job of batch
// (outcome k decoded from delivery from[k]); end ends them.
func (a *Aggregator) startSpans(batch []item, outcomes []store.Outcome, from []int) batchSpans {
	if len(outcomes) == 0 {
		return nil
	}
	jobs, tracer := batchSpans{}, a.tracer()
	for k, o := range outcomes {
		it := &batch[from[k]]
		j, ok := jobs[o.JobID]
		if !ok {
			ctx := trace.ContextWithRemoteSpanContext(context.Background(), it.trace)
			_, span := tracer.Start(ctx, spans.Aggregate, trace.WithSpanKind(trace.SpanKindConsumer))
			j = &jobSpan{span: span, parent: it.trace, last: from[k], deliveries: 1}
			jobs[o.JobID] = j
		} else if j.last != from[k] {
			j.last = from[k]
			j.deliveries++
			if it.trace.IsValid() && !it.trace.Equal(j.parent) && j.span.IsRecording() {
				j.span.AddLink(trace.Link{SpanContext: it.trace})
			}
		}
		j.outcomes++
	}
	return jobs
}

// end ends the batch's spans, as failed with err when it is not nil.
func (b batchSpans) end(err error) {
	for id, j := range b {
		if j.span.IsRecording() {
			j.span.SetAttributes(spans.JobID.String(id), spans.Outcomes.Int(j.outcomes), spans.RabbitMQ,
				spans.MessagingOperationType.String("process"), spans.MessagingOperationName.String("aggregate"),
				spans.MessagingBatchCount.Int(j.deliveries))
			spans.Fail(j.span, err)
		}
		j.span.End()
	}
}

// spanContext is the span context of job id's span; invalid when the
// batch had none.
func (b batchSpans) spanContext(id string) trace.SpanContext {
	if j, ok := b[id]; ok {
		return j.span.SpanContext()
	}
	return trace.SpanContext{}
}

// startClose starts the warren.job.close span of job, a child of the span
// in ctx (the recording that made it ready), or, when ctx has none (a
// close found by the scan, or asked for by the reconciler), of the
// request that submitted the job (warren.Job.TraceParent); the root of a
// trace of its own when the job has none either.
func (a *Aggregator) startClose(ctx context.Context, job warren.Job) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		// A close found by the scan, or asked for by the reconciler or a
		// redrive's end: it continues the trace the job was submitted in.
		if sc := (spans.Context{Parent: job.TraceParent, State: job.TraceState}).SpanContext(); sc.IsValid() {
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	ctx, span := a.tracer().Start(ctx, spans.JobClose)
	if span.IsRecording() {
		span.SetAttributes(spans.JobID.String(job.ID), spans.JobType.String(job.Type),
			spans.TaskCount.Int64(job.ExpectedTasks))
	}
	return ctx, span
}

// endClose ends the span of a close try that returned again and err.
func endClose(span trace.Span, again bool, err error) {
	if again {
		span.AddEvent("the job changed since it was read; the close starts over")
	}
	spans.Fail(span, err)
	span.End()
}

// closedSpan records on span that the job closed in state, with msg as its
// error when it failed.
func closedSpan(span trace.Span, state warren.JobState, msg string) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(spans.JobState.String(string(state)))
	if state == warren.JobFailed {
		span.SetStatus(codes.Error, msg)
	}
}
