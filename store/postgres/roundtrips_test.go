package postgres_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/postgres"
)

// sendCounter counts what a connection sends as one request: a statement
// outside a batch, or a whole batch.
type sendCounter struct{ n atomic.Int64 }

func (c *sendCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (*sendCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *sendCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (*sendCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (*sendCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// ApplyOutcomes sends BEGIN, two pipelined batches (lock and read; write
// and count) and COMMIT, whatever the batch's size and however many jobs
// it touches.
func TestApplyOutcomesSendsFourRequests(t *testing.T) {
	t.Parallel()
	b := setup(t)
	counter := &sendCounter{}
	require.NoError(t, postgres.Trace(b.ctx, b.store, b.url, counter))
	jobs := []string{b.createJob(t, 200, defaultPolicy).ID, b.createJob(t, 200, defaultPolicy).ID, b.createJob(t, 200, defaultPolicy).ID}
	b.relayAll(t)

	for _, batch := range [][]store.Outcome{
		{completed(jobs[0], 1)},
		outcomesOf(jobs, 2, 150),
		outcomesOf(jobs, 151, 200),
	} {
		before := counter.n.Load()
		report, err := b.store.ApplyOutcomes(b.ctx, batch)
		require.NoError(t, err)
		require.Equal(t, len(batch), report.Applied)
		require.Equal(t, int64(4), counter.n.Load()-before, "a batch of %d outcomes", len(batch))
	}
}

// outcomesOf is a completed outcome for each task from..to of each job.
func outcomesOf(jobs []string, from, to int64) []store.Outcome {
	var outcomes []store.Outcome
	for _, id := range jobs {
		for task := from; task <= to; task++ {
			outcomes = append(outcomes, completed(id, task))
		}
	}
	return outcomes
}

// A batch that spawns costs two requests more, whatever it spawns into
// how many jobs: the spawning jobs' row locks, and the children's insert.
func TestApplyOutcomesThatSpawnSendSixRequests(t *testing.T) {
	t.Parallel()
	b := setup(t)
	counter := &sendCounter{}
	require.NoError(t, postgres.Trace(b.ctx, b.store, b.url, counter))
	jobs := []string{b.createJob(t, 50, defaultPolicy).ID, b.createJob(t, 50, defaultPolicy).ID}
	b.relayAll(t)

	batch := outcomesOf(jobs, 1, 50)
	for i := range batch {
		if i%3 == 0 {
			batch[i].Spawn = []json.RawMessage{json.RawMessage(`1`), json.RawMessage(`2`)}
		}
	}
	before := counter.n.Load()
	report, err := b.store.ApplyOutcomes(b.ctx, batch)
	require.NoError(t, err)
	require.Equal(t, len(batch), report.Applied)
	require.Equal(t, 68, report.Spawned)
	require.Equal(t, int64(6), counter.n.Load()-before)
}
