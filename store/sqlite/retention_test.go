package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// Deleting a job turns the writer's foreign keys off for its transaction
// only: afterwards, and after a deletion that failed, they are on again.
func TestDeletingKeepsForeignKeysOn(t *testing.T) {
	t.Parallel()
	s := openTest(t, filepath.Join(t.TempDir(), "warren.db"))
	ctx := t.Context()
	job, _, err := s.CreateJob(ctx, store.NewJob{Type: "t"}, payloads(2))
	require.NoError(t, err)
	require.ErrorIs(t, s.DeleteJob(ctx, job.ID), store.ErrJobOpen)
	requireForeignKeys(t, s)

	_, err = s.CancelJob(ctx, job.ID)
	require.NoError(t, err)
	require.NoError(t, s.DeleteJob(ctx, job.ID))
	requireForeignKeys(t, s)
	_, err = s.DeleteExpiredJobs(ctx, store.Expiry{Now: time.Now(), Retention: time.Hour}, 10)
	require.NoError(t, err)
	requireForeignKeys(t, s)

	var orphans int
	require.NoError(t, s.r.QueryRowContext(ctx, `SELECT count(*) FROM tasks WHERE job_id = ?`, job.ID).Scan(&orphans))
	require.Equal(t, 2, orphans, "the job's tasks wait for PurgeDeletedTasks")
	_, err = s.PurgeDeletedTasks(ctx, 10)
	require.NoError(t, err)
	require.NoError(t, s.r.QueryRowContext(ctx, `SELECT count(*) FROM tasks`).Scan(&orphans))
	require.Zero(t, orphans)
	var tombstones int
	require.NoError(t, s.r.QueryRowContext(ctx, `SELECT count(*) FROM deleted_jobs`).Scan(&tombstones))
	require.Zero(t, tombstones, "a purged job is forgotten")
}

// requireForeignKeys fails unless the writer connection enforces foreign
// keys.
func requireForeignKeys(t *testing.T, s *Store) {
	t.Helper()
	var on int
	require.NoError(t, s.w.QueryRowContext(t.Context(), `PRAGMA foreign_keys`).Scan(&on))
	require.Equal(t, 1, on, "the writer enforces foreign keys")
}

// The retention queries read their indexes in order: nothing is sorted,
// and the purge seeks each range of tasks.
func TestRetentionQueriesReadOnlyWhatTheyNeed(t *testing.T) {
	t.Parallel()
	s := openTest(t, filepath.Join(t.TempDir(), "warren.db"))
	for name, query := range map[string]string{
		"by default": expiringByDefaultSQL,
		"by own":     expiringByOwnSQL,
	} {
		plan := queryPlan(t, s.r, query, 1, 10)
		require.Len(t, plan, 1, "%s: %q", name, plan)
		require.Contains(t, plan[0], "SEARCH jobs USING INDEX jobs_expiring_by_", "%s: %q", name, plan)
	}
	plan := queryPlan(t, s.r, `SELECT rowid FROM tasks WHERE job_id = ? AND task_id > ? AND task_id <= ?`, "j", 1, 10)
	require.Len(t, plan, 1, "%q", plan)
	require.Contains(t, plan[0], "(job_id=? AND task_id>? AND task_id<?)", "the purge seeks its range: %q", plan)
}

// The SQLite file reuses the pages deleted jobs freed: jobs created,
// closed, deleted and purged round after round take the pages of the
// rounds before, and neither the database nor its file keeps growing.
// Nothing is vacuumed.
func TestDeletedJobsPagesAreReused(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "warren.db")
	s := openTest(t, path)
	ctx := t.Context()
	const rounds, jobs, tasks = 4, 4, 500
	payload := json.RawMessage(fmt.Sprintf(`{"text":%q}`, string(make([]byte, 200))))
	create := func() []string {
		var ids []string
		for range jobs {
			job, _, err := s.CreateJob(ctx, store.NewJob{Type: "t"}, func(yield func(json.RawMessage, error) bool) {
				for range tasks {
					if !yield(payload, nil) {
						return
					}
				}
			})
			require.NoError(t, err)
			_, err = s.CancelJob(ctx, job.ID)
			require.NoError(t, err)
			ids = append(ids, job.ID)
		}
		return ids
	}
	remove := func(ids []string) {
		for _, id := range ids {
			require.NoError(t, s.DeleteJob(ctx, id))
		}
		for {
			n, err := s.PurgeDeletedTasks(ctx, 2000)
			require.NoError(t, err)
			if n < 2000 {
				return
			}
		}
	}

	remove(create())
	firstPages, firstFree := pragma(t, s, "page_count"), pragma(t, s, "freelist_count")
	require.Greater(t, firstFree, firstPages/2, "the deleted jobs' pages are free")
	for round := 2; round <= rounds; round++ {
		ids := create()
		require.Less(t, pragma(t, s, "freelist_count"), firstFree/4, "round %d: new jobs take the free pages", round)
		remove(ids)
	}
	pages := pragma(t, s, "page_count")
	t.Logf("pages: %d after the first round (%d free), %d after %d rounds", firstPages, firstFree, pages, rounds)
	require.LessOrEqual(t, pages, firstPages+firstPages/10,
		"after %d rounds the database has %d pages, the first round %d: freed pages are reused", rounds, pages, firstPages)

	_, err := s.w.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`)
	require.NoError(t, err)
	info, err := os.Stat(path)
	require.NoError(t, err)
	require.LessOrEqual(t, info.Size(), (firstPages+firstPages/10)*pragma(t, s, "page_size"), "the file does not grow either")
}

// pragma returns the integer value of PRAGMA name on the writer.
func pragma(t *testing.T, s *Store, name string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, s.w.QueryRowContext(t.Context(), `PRAGMA `+name).Scan(&n))
	return n
}

// BenchmarkDeleteExpiredJobs measures one batch of the retention sweep:
// DeleteExpiredJobs of 500 closed jobs of 100 tasks (phase "jobs"), then
// PurgeDeletedTasks of their 50,000 task rows in transactions of 5,000
// ("tasks", per transaction).
func BenchmarkDeleteExpiredJobs(b *testing.B) {
	const jobs, tasks, purgeBatch = 500, 100, 5000
	s := openTest(b, filepath.Join(b.TempDir(), "warren.db"))
	ctx := context.Background()
	var deleteTime, purgeTime time.Duration
	purges := 0
	for b.Loop() {
		b.StopTimer()
		for range jobs {
			job, _, err := s.CreateJob(ctx, store.NewJob{Type: "t", Policy: warren.Policy{Retention: time.Second}}, payloads(tasks))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.CancelJob(ctx, job.ID); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		start := time.Now()
		n, err := s.DeleteExpiredJobs(ctx, store.Expiry{Now: time.Now().Add(time.Hour)}, jobs)
		if err != nil || n != jobs {
			b.Fatalf("deleted %d of %d: %v", n, jobs, err)
		}
		deleteTime += time.Since(start)
		for {
			start = time.Now()
			n, err := s.PurgeDeletedTasks(ctx, purgeBatch)
			if err != nil {
				b.Fatal(err)
			}
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

// Deleting a job deletes the spawn parts of its runs that never
// completed; a run recorded from its parts leaves none.
func TestDeletingAJobDeletesItsStagedSpawnParts(t *testing.T) {
	t.Parallel()
	s := openTest(t, filepath.Join(t.TempDir(), "warren.db"))
	ctx := t.Context()
	job, _, err := s.CreateJob(ctx, store.NewJob{Type: "t"}, payloads(2))
	require.NoError(t, err)
	_, err = s.RelayBatch(ctx, 10, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		refs := make([]store.TaskRef, len(tasks))
		for i, tk := range tasks {
			refs[i] = tk.Ref()
		}
		return refs, nil
	})
	require.NoError(t, err)
	part := func(taskID int64, run string, n int) store.Outcome {
		return store.Outcome{JobID: job.ID, TaskID: taskID, State: warren.TaskCompleted, Result: json.RawMessage(`1`),
			Spawn: []json.RawMessage{json.RawMessage(`0`)}, SpawnRun: run, SpawnPart: n, SpawnParts: 2}
	}
	staged := func() int {
		var n int
		require.NoError(t, s.r.QueryRowContext(ctx, `SELECT count(*) FROM spawn_parts`).Scan(&n))
		return n
	}
	_, err = s.ApplyOutcomes(ctx, []store.Outcome{part(1, "dead", 1), part(2, "done", 1)})
	require.NoError(t, err)
	require.Equal(t, 2, staged())
	_, err = s.ApplyOutcomes(ctx, []store.Outcome{part(2, "done", 2)})
	require.NoError(t, err)
	require.Equal(t, 1, staged(), "task 2's run is recorded: its parts go")

	_, err = s.CancelJob(ctx, job.ID)
	require.NoError(t, err)
	require.NoError(t, s.DeleteJob(ctx, job.ID))
	require.Zero(t, staged(), "task 1's dead run's part goes with the job")
}
