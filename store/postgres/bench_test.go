package postgres_test

import (
	"encoding/json"
	"fmt"
	"iter"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
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

// BenchmarkDeleteExpiredJobs measures one batch of the retention sweep:
// DeleteExpiredJobs of 500 closed jobs of 100 tasks ("ms/500-jobs"),
// then PurgeDeletedTasks of their 50,000 task rows in transactions of
// 5,000 ("ms/purge-tx" each).
func BenchmarkDeleteExpiredJobs(b *testing.B) {
	const jobs, tasks, purgeBatch = 500, 100, 5000
	tb := setup(b)
	var deleteTime, purgeTime time.Duration
	purges := 0
	for b.Loop() {
		b.StopTimer()
		for range jobs {
			job, _, err := tb.store.CreateJob(tb.ctx, store.NewJob{Type: "bench", Policy: warren.Policy{Retention: time.Second}}, benchPayloads(tasks))
			require.NoError(b, err)
			_, err = tb.store.CancelJob(tb.ctx, job.ID)
			require.NoError(b, err)
		}
		b.StartTimer()
		start := time.Now()
		n, err := tb.store.DeleteExpiredJobs(tb.ctx, store.Expiry{Now: time.Now().Add(time.Hour)}, jobs)
		require.NoError(b, err)
		require.Equal(b, jobs, n)
		deleteTime += time.Since(start)
		for {
			start = time.Now()
			n, err := tb.store.PurgeDeletedTasks(tb.ctx, purgeBatch)
			require.NoError(b, err)
			purgeTime += time.Since(start)
			purges++
			if n < purgeBatch {
				break
			}
		}
	}
	b.ReportMetric(float64(deleteTime.Microseconds())/1000/float64(b.N), "ms/500-jobs")
	b.ReportMetric(float64(purgeTime.Microseconds())/1000/float64(purges), "ms/purge-tx")
	b.ReportMetric(float64((deleteTime+purgeTime).Microseconds())/1000/float64(b.N), "ms/batch")
}

// BenchmarkRelayRound measures relay rounds of 500 tasks (batch_size 32)
// with a publish that confirms everything at once: what the store costs
// the relay per task, without the broker.
func BenchmarkRelayRound(b *testing.B) {
	const round, tasks = 500, 100_000
	tb := setup(b)
	job, _, err := tb.store.CreateJob(tb.ctx, store.NewJob{Type: "bench", Policy: warren.Policy{BatchSize: 32}}, benchPayloads(tasks))
	require.NoError(b, err)
	left := tasks
	for b.Loop() {
		if left < round {
			b.StopTimer()
			job, _, err = tb.store.CreateJob(tb.ctx, store.NewJob{Type: "bench", Policy: warren.Policy{BatchSize: 32}}, benchPayloads(tasks))
			require.NoError(b, err)
			left = tasks
			b.StartTimer()
		}
		n, err := tb.store.RelayRound(tb.ctx, store.Round{Messages: round, Tasks: round}, publishAll)
		require.NoError(b, err)
		require.Equal(b, round, n, "job %s", job.ID)
		left -= n
	}
	b.ReportMetric(float64(round*b.N)/b.Elapsed().Seconds(), "tasks/s")
}
