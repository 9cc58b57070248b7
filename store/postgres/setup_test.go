package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/postgres"
	"github.com/warrenhq/warren/store/postgres/pgtest"
)

// testBundle is what most tests need: a store in a schema of its own, and
// the URL to open more stores on the same schema (another "server").
type testBundle struct {
	ctx   context.Context
	store *postgres.Store
	url   string
}

func setup(t testing.TB) *testBundle {
	t.Helper()
	url := pgtest.URL(t)
	return &testBundle{ctx: context.Background(), store: open(t, url), url: url}
}

// open opens one more store on url, closed when the test ends.
func open(t testing.TB, url string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// payloads yields n payloads {"n":1} .. {"n":n}, generated as they are
// pulled.
func payloads(n int) iter.Seq2[json.RawMessage, error] {
	return func(yield func(json.RawMessage, error) bool) {
		for i := 1; i <= n; i++ {
			if !yield(json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), nil) {
				return
			}
		}
	}
}

// createJob creates a job of n tasks with policy p.
func (b *testBundle) createJob(t testing.TB, n int, p warren.Policy) warren.Job {
	t.Helper()
	job, created, err := b.store.CreateJob(b.ctx, store.NewJob{Type: "test", Policy: p}, payloads(n))
	require.NoError(t, err)
	require.True(t, created)
	return job
}

// publishAll is a publish func whose broker confirms everything.
func publishAll(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
	refs := make([]store.TaskRef, len(tasks))
	for i, task := range tasks {
		refs[i] = task.Ref()
	}
	return refs, nil
}

// relayAll publishes every pending task.
func (b *testBundle) relayAll(t testing.TB) {
	t.Helper()
	for {
		n, err := b.store.RelayBatch(b.ctx, 1000, publishAll)
		require.NoError(t, err)
		if n == 0 {
			return
		}
	}
}

// completed returns the outcome "task completed with result {"r":task}".
func completed(jobID string, taskID int64) store.Outcome {
	return store.Outcome{
		JobID: jobID, TaskID: taskID, State: warren.TaskCompleted,
		Result: json.RawMessage(fmt.Sprintf(`{"r":%d}`, taskID)), Attempts: 1, Worker: "w1",
	}
}

// failed returns the outcome "task failed with error boom <task>".
func failed(jobID string, taskID int64) store.Outcome {
	return store.Outcome{
		JobID: jobID, TaskID: taskID, State: warren.TaskFailed,
		Error: fmt.Sprintf("boom %d", taskID), Attempts: 4, Worker: "w2",
	}
}

// defaultPolicy is a job policy with nothing tolerated.
var defaultPolicy = warren.Policy{Reduce: "collect", MaxRetries: warren.DefaultMaxRetries}

// count runs a count query on its own connection to url.
func count(t testing.TB, url, sql string, args ...any) int64 {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	require.NoError(t, err)
	defer func() { _ = conn.Close(context.Background()) }()
	var n int64
	require.NoError(t, conn.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// pgExec runs one statement on its own connection to url.
func pgExec(t testing.TB, url, sql string, args ...any) error {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	_, err = conn.Exec(context.Background(), sql, args...)
	return err
}

// finish closes job id as an aggregator does: at the version it reads,
// reading it again while the job moves under it. It returns false when
// the job was closed already.
func finish(ctx context.Context, s store.Store, id string, state warren.JobState, result []byte, msg string) (bool, error) {
	for {
		job, err := s.GetJob(ctx, id)
		if err != nil || job.State.Terminal() {
			return false, err
		}
		ok, err := s.FinishJob(ctx, id, job.Version, state, result, msg)
		if err != nil || ok {
			return ok, err
		}
	}
}
