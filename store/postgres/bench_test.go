package postgres_test

import (
	"encoding/json"
	"fmt"
	"iter"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/store"
)

// benchPayloads yields n payloads of about 60 bytes, like a small task's.
func benchPayloads(n int) iter.Seq2[json.RawMessage, error] {
	return func(yield func(json.RawMessage, error) bool) {
		for i := 1; i <= n; i++ {
			p := fmt.Appendf(nil, `{"key":"images/2024/05/%08d.jpg","width":320}`, i)
			if !yield(p, nil) {
				return
			}
		}
	}
}

func BenchmarkCreateJob100k(b *testing.B) {
	const tasks = 100_000
	tb := setup(b)
	b.ReportAllocs()
	for b.Loop() {
		_, _, err := tb.store.CreateJob(tb.ctx, store.NewJob{Type: "bench"}, benchPayloads(tasks))
		require.NoError(b, err)
	}
	b.ReportMetric(float64(tasks*b.N)/b.Elapsed().Seconds(), "tasks/s")
}

func BenchmarkApplyOutcomes(b *testing.B) {
	const batch = 500
	tb := setup(b)
	// One job with a fresh batch of queued tasks for every iteration;
	// b.Loop runs the setup once, however many iterations follow.
	const maxBatches = 400
	job, _, err := tb.store.CreateJob(tb.ctx, store.NewJob{Type: "bench"}, benchPayloads(batch*maxBatches))
	require.NoError(b, err)
	require.NoError(b, pgExec(b, tb.url, `UPDATE tasks SET state = 'queued', queued_at = now()`))
	started := time.Now().UTC()

	next := int64(1)
	for b.Loop() {
		if next > batch*maxBatches {
			b.StopTimer()
			job, _, err = tb.store.CreateJob(tb.ctx, store.NewJob{Type: "bench"}, benchPayloads(batch*maxBatches))
			require.NoError(b, err)
			require.NoError(b, pgExec(b, tb.url, `UPDATE tasks SET state = 'queued', queued_at = now() WHERE state = 'pending'`))
			next = 1
			b.StartTimer()
		}
		outcomes := make([]store.Outcome, batch)
		for i := range outcomes {
			outcomes[i] = store.Outcome{
				JobID: job.ID, TaskID: next, State: "completed",
				Result: json.RawMessage(`{"bytes":48213}`), Attempts: 1, Worker: "bench-1", StartedAt: &started,
			}
			next++
		}
		report, err := tb.store.ApplyOutcomes(tb.ctx, outcomes)
		require.NoError(b, err)
		require.Equal(b, batch, report.Applied)
	}
	b.ReportMetric(float64(batch*b.N)/b.Elapsed().Seconds(), "outcomes/s")
}
