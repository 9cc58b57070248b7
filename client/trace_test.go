package client_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenhq/warren/client"
	"github.com/warrenhq/warren/internal/spans"
	"github.com/warrenhq/warren/store"
)

// A job submitted with a context that has a span is in that span's trace:
// the client sends its traceparent, and the job keeps it for the relay
// (here the server traces nothing itself, so it passes it on as it came).
func TestSubmitSendsTheTraceOfItsContext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	sc := spans.Context{Parent: parent}.SpanContext()
	require.True(t, sc.IsValid())
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	job, err := b.client.Submit(ctx, client.JobSpec{Type: "echo", Tasks: []json.RawMessage{json.RawMessage(`1`)}})
	require.NoError(t, err)

	_, err = b.store.RelayBatch(context.Background(), 1, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		require.Len(t, tasks, 1)
		require.Equal(t, job.ID, tasks[0].JobID)
		require.Equal(t, parent, tasks[0].TraceParent)
		return nil, nil
	})
	require.NoError(t, err)
}
