package postgres_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/postgres"
)

// explain returns PostgreSQL's plan for query with args, as text.
func explain(t *testing.T, url, query string, args ...any) string {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	require.NoError(t, err)
	defer func() { _ = conn.Close(context.Background()) }()
	rows, err := conn.Query(context.Background(), `EXPLAIN `+query, args...)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return strings.Join(lines, "\n")
}

// On a store of some size, the retention statements read their indexes:
// the expiry candidates through the partial indexes of closed jobs, the
// purge each job's range of tasks through tasks_pkey. None reads a whole
// table.
func TestRetentionStatementsUseTheirIndexes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const jobs, tasks = 300, 100
	var ids []string
	for i := range jobs {
		p := defaultPolicy
		if i%2 == 0 {
			p.Retention = time.Hour
		}
		job := b.createJob(t, tasks, p)
		if i%3 == 0 {
			_, err := b.store.CancelJob(b.ctx, job.ID)
			require.NoError(t, err)
		}
		ids = append(ids, job.ID)
	}
	require.NoError(t, pgExec(t, b.url, `ANALYZE`))
	now := time.Now()

	plan := explain(t, b.url, postgres.ExpiringByDefaultSQL, now.Add(-time.Hour), 500)
	require.Contains(t, plan, "jobs_expiring_by_default_idx", plan)
	plan = explain(t, b.url, postgres.ExpiringByOwnSQL, now, 500)
	require.Contains(t, plan, "jobs_expiring_by_own_idx", plan)
	plan = explain(t, b.url, postgres.PurgeTasksSQL, ids[:3], []int64{0, 10, 50}, []int64{100, 60, 1 << 62})
	require.Contains(t, plan, "tasks_pkey", plan)
	require.NotContains(t, plan, "Seq Scan on tasks", plan)
}

// Retention is stored in milliseconds, as the task timeout is.
func TestRetentionIsStoredInMilliseconds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job := b.createJob(t, 1, warren.Policy{Reduce: "collect", Retention: 90*time.Minute + 1500*time.Microsecond})
	require.Equal(t, 90*time.Minute+time.Millisecond, job.Policy.Retention)
	require.Equal(t, int64(90*60*1000+1), count(t, b.url, `SELECT retention_ms FROM jobs WHERE id = $1`, job.ID))
	_, err := b.store.CancelJob(b.ctx, job.ID)
	require.NoError(t, err)
	n, err := b.store.DeleteExpiredJobs(b.ctx, store.Expiry{Now: time.Now().Add(2 * time.Hour)}, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, int64(1), count(t, b.url, `SELECT count(*) FROM deleted_jobs WHERE job_id = $1 AND tasks = 1`, job.ID))
}

// Deleting a job deletes the spawn parts of its runs that never
// completed; a run recorded from its parts leaves none.
func TestDeletingAJobDeletesItsStagedSpawnParts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job := b.createJob(t, 2, defaultPolicy)
	b.relayAll(t)
	part := func(taskID int64, run string, n int) store.Outcome {
		return store.Outcome{JobID: job.ID, TaskID: taskID, State: warren.TaskCompleted, Result: []byte(`1`),
			Spawn: []json.RawMessage{json.RawMessage(`0`)}, SpawnRun: run, SpawnPart: n, SpawnParts: 2}
	}
	conn, err := pgx.Connect(b.ctx, b.url)
	require.NoError(t, err)
	defer func() { _ = conn.Close(b.ctx) }()
	staged := func() int {
		var n int
		require.NoError(t, conn.QueryRow(b.ctx, `SELECT count(*) FROM spawn_parts`).Scan(&n))
		return n
	}
	_, err = b.store.ApplyOutcomes(b.ctx, []store.Outcome{part(1, "dead", 1), part(2, "done", 1)})
	require.NoError(t, err)
	require.Equal(t, 2, staged())
	_, err = b.store.ApplyOutcomes(b.ctx, []store.Outcome{part(2, "done", 2)})
	require.NoError(t, err)
	require.Equal(t, 1, staged(), "task 2's run is recorded: its parts go")

	_, err = b.store.CancelJob(b.ctx, job.ID)
	require.NoError(t, err)
	require.NoError(t, b.store.DeleteJob(b.ctx, job.ID))
	require.Zero(t, staged(), "task 1's dead run's part goes with the job")
}
