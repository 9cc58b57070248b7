package aggregator_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/aggregator"
	"github.com/warrenhq/warren/internal/spans"
	"github.com/warrenhq/warren/store"
)

// A close that no recording asked for (the scan's, or the reconciler's)
// continues the trace the job was submitted in: the store gives the job's
// trace context back with the job.
func TestACloseFoundByTheScanContinuesTheJobsTrace(t *testing.T) {
	t.Parallel()
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	b := setupClose(t, nil, aggregator.Config{TracerProvider: tp})

	const traceID, spanID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	job, _, err := b.store.CreateJob(b.ctx, store.NewJob{Type: "t", Policy: warren.Policy{Reduce: "collect"},
		TraceParent: "00-" + traceID + "-" + spanID + "-01"},
		func(yield func(json.RawMessage, error) bool) { yield(json.RawMessage(`1`), nil) })
	require.NoError(t, err)
	_, err = b.store.RelayBatch(b.ctx, 1, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		return []store.TaskRef{tasks[0].Ref()}, nil
	})
	require.NoError(t, err)
	now := time.Now().UTC()
	_, err = b.store.ApplyOutcomes(b.ctx, []store.Outcome{{JobID: job.ID, TaskID: 1, State: warren.TaskCompleted,
		Result: json.RawMessage(`1`), FinishedAt: &now}})
	require.NoError(t, err)
	got, err := b.store.GetJob(b.ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, "00-"+traceID+"-"+spanID+"-01", got.TraceParent, "the store gives the job's trace context back")

	require.NoError(t, b.agg.CloseJob(context.Background(), job.ID))
	var closes []tracetest.SpanStub
	for _, s := range exporter.GetSpans() {
		if s.Name == spans.JobClose {
			closes = append(closes, s)
		}
	}
	require.Len(t, closes, 1)
	require.Equal(t, traceID, closes[0].SpanContext.TraceID().String(), "the close is in the job's trace")
	require.Equal(t, spanID, closes[0].Parent.SpanID().String(), "a child of the submission's span")
}
