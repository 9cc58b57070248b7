package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, func(t *testing.T) store.Store {
		return openTest(t, filepath.Join(t.TempDir(), "warren.db"))
	})
}

// openTest opens the store at path and closes it when t ends.
func openTest(tb testing.TB, path string) *Store {
	tb.Helper()
	s, err := Open(context.Background(), path)
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, s.Close()) })
	return s
}

func TestOpenConfiguresDurableWAL(t *testing.T) {
	t.Parallel()
	s := openTest(t, filepath.Join(t.TempDir(), "warren.db"))
	var (
		journal     string
		synchronous int
		foreignKeys int
	)
	require.NoError(t, s.w.QueryRowContext(t.Context(), `PRAGMA journal_mode`).Scan(&journal))
	require.Equal(t, "wal", journal)
	require.NoError(t, s.w.QueryRowContext(t.Context(), `PRAGMA synchronous`).Scan(&synchronous))
	require.Equal(t, 2, synchronous, "synchronous=FULL: a commit is durable")
	require.NoError(t, s.w.QueryRowContext(t.Context(), `PRAGMA foreign_keys`).Scan(&foreignKeys))
	require.Equal(t, 1, foreignKeys)
}

func TestOpenRejectsNonFilePaths(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"", ":memory:", "warren.db?mode=ro"} {
		_, err := Open(t.Context(), path)
		require.Error(t, err, path)
	}
}

func TestOutboxQueryReadsOnlyWhatItReturns(t *testing.T) {
	t.Parallel()
	s := openTest(t, filepath.Join(t.TempDir(), "warren.db"))
	for _, q := range []struct {
		sql  string
		args []any
	}{{outboxSQL, []any{"job", 10}}, {pendingJobsSQL, []any{10, 10}}} {
		plan := queryPlan(t, s.r, q.sql, q.args...)
		for _, step := range plan {
			require.NotContains(t, step, "TEMP B-TREE", "the query sorts: %q", plan)
			require.NotRegexp(t, `^SCAN (t|tasks)\b`, step, "the query scans every task: %q", plan)
		}
	}
}

func TestMigrationsAreRecorded(t *testing.T) {
	t.Parallel()
	s := openTest(t, filepath.Join(t.TempDir(), "warren.db"))
	ms, err := migrations()
	require.NoError(t, err)
	require.NotEmpty(t, ms)
	require.NoError(t, s.Migrate(t.Context()))

	var n, latest int
	require.NoError(t, s.r.QueryRowContext(t.Context(),
		`SELECT COUNT(*), MAX(version) FROM warren_schema_migrations`).Scan(&n, &latest))
	require.Equal(t, len(ms), n, "each migration recorded once")
	require.Equal(t, ms[len(ms)-1].Version, latest)
}

func TestMigrateRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	s := openTest(t, filepath.Join(t.TempDir(), "warren.db"))
	_, err := s.w.ExecContext(t.Context(), `INSERT INTO warren_schema_migrations (version, name, applied_at) VALUES (9999, 'future.sql', 0)`)
	require.NoError(t, err)
	require.ErrorContains(t, s.Migrate(t.Context()), "9999")
}

func TestReopenKeepsData(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "warren.db")
	s, err := Open(t.Context(), path)
	require.NoError(t, err)
	job, _, err := s.CreateJob(t.Context(), store.NewJob{Type: "t"}, payloads(3))
	require.NoError(t, err)
	_, err = s.ApplyOutcomes(t.Context(), []store.Outcome{{JobID: job.ID, TaskID: 2, State: warren.TaskCompleted, Result: json.RawMessage(`2`)}})
	require.NoError(t, err)
	require.NoError(t, s.Close())

	s = openTest(t, path)
	got, err := s.GetJob(t.Context(), job.ID)
	require.NoError(t, err)
	require.Equal(t, int64(1), got.CompletedTasks)
	require.Equal(t, job.CreatedAt, got.CreatedAt, "timestamps round-trip to the microsecond")
}

// TestConcurrentOpensOfOneFileTakeTurns: stores opening one new file at
// once hold it one at a time: each open migrates the file or is refused
// with ErrInUse, never a busy error or a half-migrated file.
func TestConcurrentOpensOfOneFileTakeTurns(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "warren.db")
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			s, err := Open(t.Context(), path)
			if err == nil {
				err = s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	opened := 0
	for _, err := range errs {
		if err == nil {
			opened++
			continue
		}
		require.ErrorIs(t, err, ErrInUse)
	}
	require.Positive(t, opened)
	s := openTest(t, path)
	_, _, err := s.CreateJob(t.Context(), store.NewJob{Type: "t"}, payloads(1))
	require.NoError(t, err, "the file is migrated whole")
}

func TestMixedWritersNeverBusy(t *testing.T) {
	t.Parallel()
	s := openTest(t, filepath.Join(t.TempDir(), "warren.db"))
	const workers, jobsEach, tasks = 6, 10, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			errs <- mixedWrites(t.Context(), s, jobsEach, tasks)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	jobs, _, err := s.ListJobs(t.Context(), store.ListJobsOpts{State: warren.JobCompleted, Limit: workers * jobsEach})
	require.NoError(t, err)
	require.Len(t, jobs, workers*jobsEach)
}

// mixedWrites runs jobs through create, relay, outcomes and finish.
func mixedWrites(ctx context.Context, s *Store, jobs, tasks int) error {
	for range jobs {
		job, _, err := s.CreateJob(ctx, store.NewJob{Type: "t"}, payloads(tasks))
		if err != nil {
			return err
		}
		// Relay rounds share their room between every open job, this
		// writer's and the others': relay until the outbox is empty.
		for {
			n, err := s.RelayBatch(ctx, tasks, publishAll)
			if err != nil {
				return err
			}
			if n == 0 {
				break
			}
		}
		var outcomes []store.Outcome
		for i := int64(1); i <= int64(tasks); i++ {
			outcomes = append(outcomes, store.Outcome{JobID: job.ID, TaskID: i, State: warren.TaskCompleted, Result: json.RawMessage(`1`)})
		}
		report, err := s.ApplyOutcomes(ctx, outcomes)
		if err != nil {
			return err
		}
		if len(report.ReadyToClose) != 1 {
			return fmt.Errorf("job %s: ReadyToClose %v", job.ID, report.ReadyToClose)
		}
		if job, err = s.GetJob(ctx, job.ID); err != nil {
			return err
		}
		if _, err := s.FinishJob(ctx, job.ID, job.Version, warren.JobCompleted, []byte(`[]`), ""); err != nil {
			return err
		}
	}
	return nil
}

func BenchmarkCreateJob100k(b *testing.B) {
	s := openTest(b, filepath.Join(b.TempDir(), "warren.db"))
	const n = 100_000
	for b.Loop() {
		if _, _, err := s.CreateJob(b.Context(), store.NewJob{Type: "bench"}, payloads(n)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tasks/s")
}

func BenchmarkApplyOutcomes(b *testing.B) {
	for _, batch := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			s := openTest(b, filepath.Join(b.TempDir(), "warren.db"))
			const tasksPerJob = 100_000
			var (
				job  warren.Job
				next = int64(tasksPerJob) // forces a first job
			)
			outcomes := make([]store.Outcome, batch)
			for b.Loop() {
				if next+int64(batch) > tasksPerJob {
					b.StopTimer()
					var err error
					if job, _, err = s.CreateJob(b.Context(), store.NewJob{Type: "bench"}, payloads(tasksPerJob)); err != nil {
						b.Fatal(err)
					}
					next = 0
					b.StartTimer()
				}
				for i := range outcomes {
					next++
					outcomes[i] = store.Outcome{JobID: job.ID, TaskID: next, State: warren.TaskCompleted, Result: json.RawMessage(`{"n":1}`), Attempts: 1}
				}
				report, err := s.ApplyOutcomes(b.Context(), outcomes)
				if err != nil {
					b.Fatal(err)
				}
				if report.Applied != batch {
					b.Fatalf("applied %d of %d", report.Applied, batch)
				}
			}
			b.ReportMetric(float64(batch*b.N)/b.Elapsed().Seconds(), "outcomes/s")
		})
	}
}

// payloads yields n small JSON payloads.
func payloads(n int) func(yield func(json.RawMessage, error) bool) {
	return func(yield func(json.RawMessage, error) bool) {
		for i := range n {
			if !yield(json.RawMessage(fmt.Sprintf(`{"i":%d}`, i+1)), nil) {
				return
			}
		}
	}
}

// publishAll is a publish func whose broker confirms every task.
func publishAll(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
	refs := make([]store.TaskRef, len(tasks))
	for i, t := range tasks {
		refs[i] = t.Ref()
	}
	return refs, nil
}

// The SQLite relay holds no transaction while it publishes, so a fast
// worker's result can finish a task before the relay marks it: the task
// keeps its terminal state and still gets its queued_at.
func TestResultBeforeMarkKeepsStateAndGetsQueuedAt(t *testing.T) {
	t.Parallel()
	s := openTest(t, filepath.Join(t.TempDir(), "w.db"))
	ctx := context.Background()
	job, _, err := s.CreateJob(ctx, store.NewJob{Type: "t", Policy: warren.Policy{Reduce: "collect"}}, payloads(2))
	require.NoError(t, err)
	n, err := s.RelayBatch(ctx, 10, func(ctx context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		_, err := s.ApplyOutcomes(ctx, []store.Outcome{{JobID: job.ID, TaskID: 1, State: warren.TaskCompleted, Result: json.RawMessage(`1`), Attempts: 1}})
		require.NoError(t, err)
		return publishAll(ctx, tasks)
	})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	tasks, _, err := s.ListTasks(ctx, job.ID, store.ListTasksOpts{})
	require.NoError(t, err)
	require.Equal(t, warren.TaskCompleted, tasks[0].State)
	require.NotNil(t, tasks[0].QueuedAt)
	require.Equal(t, warren.TaskQueued, tasks[1].State)
	got, err := s.GetJob(ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, warren.JobRunning, got.State)
}

// The relay holds no write lock while it publishes: a task it offered may
// be cancelled by a close and redriven meanwhile, pending again at a new
// generation that the published message does not carry. The mark leaves
// it pending, for the relay to publish at its new generation.
func TestMarkSkipsATaskRedrivenWhilePublished(t *testing.T) {
	t.Parallel()
	s := openTest(t, filepath.Join(t.TempDir(), "w.db"))
	ctx := context.Background()
	job, _, err := s.CreateJob(ctx, store.NewJob{Type: "t", Policy: warren.Policy{FailFast: true}}, payloads(2))
	require.NoError(t, err)
	_, err = s.RelayBatch(ctx, 1, publishAll)
	require.NoError(t, err)
	n, err := s.RelayBatch(ctx, 1, func(ctx context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		require.Equal(t, 1, tasks[0].Generation)
		_, err := s.ApplyOutcomes(ctx, []store.Outcome{{JobID: job.ID, TaskID: 1, State: warren.TaskFailed, Error: "boom"}})
		require.NoError(t, err)
		j, err := s.GetJob(ctx, job.ID)
		require.NoError(t, err)
		closed, err := s.FinishJob(ctx, job.ID, j.Version, warren.JobFailed, nil, "failed fast")
		require.NoError(t, err)
		require.True(t, closed)
		_, requeued, err := s.RedriveJob(ctx, job.ID)
		require.NoError(t, err)
		require.Equal(t, 2, requeued)
		return publishAll(ctx, tasks)
	})
	require.NoError(t, err)
	require.Zero(t, n, "task 2 went out at generation 1; it is at 2 now")
	var offered []store.OutboxTask
	_, err = s.RelayBatch(ctx, 10, func(ctx context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		offered = tasks
		return publishAll(ctx, tasks)
	})
	require.NoError(t, err)
	require.Len(t, offered, 2)
	require.Equal(t, []int{2, 2}, []int{offered[0].Generation, offered[1].Generation})
}

// A slow upload streaming into CreateJob must not hold SQLite's single
// write lock: other writes go on while it is still being read.
func TestSlowSubmissionDoesNotBlockWriters(t *testing.T) {
	t.Parallel()
	s := openTest(t, filepath.Join(t.TempDir(), "w.db"))
	ctx := context.Background()
	release := make(chan struct{})
	reading := make(chan struct{})
	slow := func(yield func(json.RawMessage, error) bool) {
		if !yield(json.RawMessage(`1`), nil) {
			return
		}
		close(reading)
		<-release // the rest of the upload has not arrived yet
		yield(json.RawMessage(`2`), nil)
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := s.CreateJob(ctx, store.NewJob{Type: "slow"}, slow)
		done <- err
	}()
	<-reading
	// Another submission and an outbox round commit meanwhile.
	other, _, err := s.CreateJob(ctx, store.NewJob{Type: "fast"}, payloads(3))
	require.NoError(t, err)
	n, err := s.RelayBatch(ctx, 10, publishAll)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	close(release)
	require.NoError(t, <-done)
	got, err := s.GetJob(ctx, other.ID)
	require.NoError(t, err)
	require.Equal(t, warren.JobRunning, got.State)
}

// The reconciler's query seeks the queued tasks published before its
// cutoff through tasks_queued, in order: it never reads the others and
// never sorts.
func TestStaleQuerySeeksQueuedTasks(t *testing.T) {
	t.Parallel()
	s := openTest(t, filepath.Join(t.TempDir(), "warren.db"))
	plan := queryPlan(t, s.r, staleSQL, 0, 3600000, 10, 0)
	require.Contains(t, plan, "SEARCH t USING INDEX tasks_queued (queued_at<?)")
	for _, step := range plan {
		require.NotContains(t, step, "TEMP B-TREE", "the stale query sorts: %q", plan)
	}
}

// The reconciler's two updates read the set of tasks they are given and
// seek each task by its key: they never scan a job's tasks.
func TestLostUpdatesSeekEachTask(t *testing.T) {
	t.Parallel()
	s := openTest(t, filepath.Join(t.TempDir(), "warren.db"))
	set := `[["j",1]]`
	for _, u := range []struct {
		name, query string
		args        []any
	}{
		{"requeue", requeueLostSQL, []any{set}},
		{"fail", failLostSQL, []any{set, store.LostError, 0}},
	} {
		name, plan := u.name, queryPlan(t, s.w, u.query, u.args...)
		require.Len(t, plan, 2, "%s: %q", name, plan)
		require.Contains(t, plan[0], "SCAN json_each", name)
		require.Contains(t, plan[1], "SEARCH tasks USING", name)
		require.Contains(t, plan[1], "task_id=?", "%s: %q", name, plan)
	}
}

// queryPlan returns the steps of SQLite's plan for query, as EXPLAIN QUERY
// PLAN details.
func queryPlan(t *testing.T, db *sql.DB, query string, args ...any) []string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), `EXPLAIN QUERY PLAN `+query, args...)
	require.NoError(t, err)
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
		plan = append(plan, detail)
	}
	require.NoError(t, rows.Err())
	return plan
}

// A file written before migration 0002 migrates forward: its jobs get the
// default task timeout and the reconciler finds their stale tasks.
func TestMigratesVersion1FileForward(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "warren.db")
	ms, err := migrations()
	require.NoError(t, err)
	require.Equal(t, 1, ms[0].Version)
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	queued := time.Now().Add(-2 * time.Hour).UnixMicro()
	for _, stmt := range []string{
		`CREATE TABLE warren_schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL) STRICT`,
		ms[0].SQL,
		`INSERT INTO warren_schema_migrations VALUES (1, '` + ms[0].File + `', 0)`,
		`INSERT INTO jobs (id, type, state, expected_tasks, max_retries, created_at) VALUES ('old', 't', 'running', 1, 3, 0)`,
		fmt.Sprintf(`INSERT INTO tasks (job_id, task_id, state, payload, queued_at) VALUES ('old', 1, 'queued', X'31', %d)`, queued),
	} {
		_, err := db.ExecContext(t.Context(), stmt)
		require.NoError(t, err, stmt)
	}
	require.NoError(t, db.Close())

	s := openTest(t, path)
	job, err := s.GetJob(t.Context(), "old")
	require.NoError(t, err)
	require.Zero(t, job.Policy.TaskTimeout)
	require.Equal(t, warren.DefaultTaskTimeout, job.Policy.EffectiveTaskTimeout())
	report, err := s.ReconcileStale(t.Context(), store.Staleness{Now: time.Now()}, 10)
	require.NoError(t, err)
	require.Equal(t, 1, report.Requeued)
}

// isBusy recognises SQLite's busy answer, which connectWriter retries.
func TestIsBusyRecognisesALockedDatabase(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "busy.db")
	holder, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(0)")
	require.NoError(t, err)
	defer holder.Close()
	other, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(0)")
	require.NoError(t, err)
	defer other.Close()
	ctx := context.Background()
	_, err = holder.ExecContext(ctx, `CREATE TABLE t (x)`)
	require.NoError(t, err)
	conn, err := holder.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, `BEGIN EXCLUSIVE`)
	require.NoError(t, err)
	_, err = other.ExecContext(ctx, `INSERT INTO t VALUES (1)`)
	require.Error(t, err)
	require.True(t, isBusy(err), "%v", err)
	require.False(t, isBusy(errors.New("database is locked")))
	_, _ = conn.ExecContext(ctx, `ROLLBACK`)
}

// BenchmarkRelayRoundManyJobs measures a relay round that finds 100 open
// jobs of 5,000 pending tasks each and claims nothing (no room): the cost
// of counting each job's pending tasks up to the round's tasks, paid by
// every round while many jobs wait.
func BenchmarkRelayRoundManyJobs(b *testing.B) {
	for _, tasks := range []int{256, 2000} {
		b.Run(fmt.Sprintf("tasks=%d", tasks), func(b *testing.B) {
			s := openTest(b, filepath.Join(b.TempDir(), "warren.db"))
			for range 100 {
				if _, _, err := s.CreateJob(b.Context(), store.NewJob{Type: "bench"}, payloads(5000)); err != nil {
					b.Fatal(err)
				}
			}
			round := store.Round{Messages: 1000, Tasks: tasks, Room: func(string) int { return 0 }}
			for b.Loop() {
				if _, err := s.RelayRound(b.Context(), round, func(context.Context, []store.OutboxTask) ([]store.TaskRef, error) {
					b.Fatal("nothing should be claimed")
					return nil, nil
				}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A file written before migration 0025 (search) migrates forward: its
// jobs are found by their metadata values, queue and tasks' errors.
func TestMigratesJobsIntoTheSearch(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "warren.db")
	ms, err := migrations()
	require.NoError(t, err)
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	_, err = db.ExecContext(t.Context(), `CREATE TABLE warren_schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL) STRICT`)
	require.NoError(t, err)
	for _, m := range ms {
		if m.Version >= 25 {
			break
		}
		_, err := db.ExecContext(t.Context(), m.SQL)
		require.NoError(t, err, m.File)
		_, err = db.ExecContext(t.Context(), `INSERT INTO warren_schema_migrations VALUES (?, ?, 0)`, m.Version, m.File)
		require.NoError(t, err)
	}
	for _, stmt := range []string{
		`INSERT INTO jobs (id, type, state, expected_tasks, queue, metadata, created_at) VALUES ('old', 'Resize', 'running', 1, 'gpu',
			CAST('{"customer": {"name": "Acme Corp", "tier": 3}, "rush": true, "tags": ["Nightly"]}' AS BLOB), 0)`,
		`INSERT INTO jobs (id, type, state, expected_tasks, metadata, created_at) VALUES ('garbage', 'echo', 'running', 1, X'7b7b', 1)`,
		`INSERT INTO tasks (job_id, task_id, state, payload, error) VALUES ('old', 1, 'failed', X'31', 'KeyError: width')`,
	} {
		_, err := db.ExecContext(t.Context(), stmt)
		require.NoError(t, err, stmt)
	}
	require.NoError(t, db.Close())

	s := openTest(t, path)
	for _, q := range []string{"acme corp", "resize", "gpu", "nightly", "KEYERROR", "old"} {
		jobs, _, err := s.ListJobs(t.Context(), store.ListJobsOpts{Search: q})
		require.NoError(t, err, q)
		require.Len(t, jobs, 1, q)
		require.Equal(t, "old", jobs[0].ID, q)
	}
	jobs, _, err := s.ListJobs(t.Context(), store.ListJobsOpts{Search: "default"})
	require.NoError(t, err)
	require.Len(t, jobs, 1, "metadata that is not JSON adds nothing, the queue is there")
	require.Equal(t, "garbage", jobs[0].ID)
}

// A deleted job's task errors leave the search index as its tasks are
// purged, not when its row goes (which stays quick however many tasks
// failed).
func TestPurgedTasksLeaveTheSearchIndex(t *testing.T) {
	t.Parallel()
	s := openTest(t, filepath.Join(t.TempDir(), "warren.db"))
	ctx := t.Context()
	job, _, err := s.CreateJob(ctx, store.NewJob{Type: "t"}, func(yield func(json.RawMessage, error) bool) {
		for range 3 {
			if !yield(json.RawMessage(`1`), nil) {
				return
			}
		}
	})
	require.NoError(t, err)
	_, err = s.RelayBatch(ctx, 10, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		refs := make([]store.TaskRef, len(tasks))
		for i, tk := range tasks {
			refs[i] = tk.Ref()
		}
		return refs, nil
	})
	require.NoError(t, err)
	var outcomes []store.Outcome
	for i := int64(1); i <= 3; i++ {
		outcomes = append(outcomes, store.Outcome{JobID: job.ID, TaskID: i, State: warren.TaskFailed, Error: "boom"})
	}
	_, err = s.ApplyOutcomes(ctx, outcomes)
	require.NoError(t, err)
	job, err = s.GetJob(ctx, job.ID)
	require.NoError(t, err)
	ok, err := s.FinishJob(ctx, job.ID, job.Version, warren.JobFailed, nil, "3 failed")
	require.NoError(t, err)
	require.True(t, ok)
	count := func(table string) int {
		var n int
		require.NoError(t, s.w.QueryRowContext(ctx, `SELECT count(*) FROM `+table).Scan(&n))
		return n
	}
	require.Equal(t, 3, count("task_error_search"))

	require.NoError(t, s.DeleteJob(ctx, job.ID))
	require.Equal(t, 3, count("task_error_search"), "the tasks are not purged yet")
	require.Equal(t, 1, count("deleted_job_search"))
	require.Zero(t, count("job_search"))
	_, err = s.PurgeDeletedTasks(ctx, 2)
	require.NoError(t, err)
	require.Equal(t, 1, count("task_error_search"), "a batch of 2")
	_, err = s.PurgeDeletedTasks(ctx, 2)
	require.NoError(t, err)
	require.Zero(t, count("task_error_search"))
	require.Zero(t, count("deleted_job_search"))
}

// A file written before migration 0028 (published_at) migrates forward:
// the time the relay set becomes the job's published_at, its started_at
// the earliest start its tasks hold, its last_finished_at their latest
// finish (none for a job whose
// tasks reported none).
func TestMigratesStartedAtIntoPublishedAt(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "warren.db")
	ms, err := migrations()
	require.NoError(t, err)
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	_, err = db.ExecContext(t.Context(), `CREATE TABLE warren_schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL) STRICT`)
	require.NoError(t, err)
	for _, m := range ms {
		if m.Version >= 28 {
			break
		}
		_, err := db.ExecContext(t.Context(), m.SQL)
		require.NoError(t, err, m.File)
		_, err = db.ExecContext(t.Context(), `INSERT INTO warren_schema_migrations VALUES (?, ?, 0)`, m.Version, m.File)
		require.NoError(t, err)
	}
	// Times in microseconds: the job was published at 9 s, its tasks
	// started at 2 s and 5 s.
	for _, stmt := range []string{
		`INSERT INTO jobs (id, type, state, expected_tasks, created_at, started_at) VALUES ('ran', 't', 'running', 2, 0, 9000000)`,
		`INSERT INTO tasks (job_id, task_id, state, payload, started_at, finished_at) VALUES ('ran', 1, 'completed', X'31', 5000000, 12000000)`,
		`INSERT INTO tasks (job_id, task_id, state, payload, started_at, finished_at) VALUES ('ran', 2, 'completed', X'31', 2000000, 7000000)`,
		`INSERT INTO jobs (id, type, state, expected_tasks, created_at, started_at) VALUES ('quiet', 't', 'running', 1, 0, 9000000)`,
		`INSERT INTO tasks (job_id, task_id, state, payload) VALUES ('quiet', 1, 'failed', X'31')`,
	} {
		_, err := db.ExecContext(t.Context(), stmt)
		require.NoError(t, err, stmt)
	}
	require.NoError(t, db.Close())

	s := openTest(t, path)
	ran, err := s.GetJob(t.Context(), "ran")
	require.NoError(t, err)
	require.Equal(t, time.UnixMicro(2000000).UTC(), *ran.StartedAt, "the earliest task start")
	require.Equal(t, time.UnixMicro(9000000).UTC(), *ran.PublishedAt, "the relay's time")
	require.Equal(t, time.UnixMicro(12000000).UTC(), *ran.LastFinishedAt, "the latest task finish")
	quiet, err := s.GetJob(t.Context(), "quiet")
	require.NoError(t, err)
	require.Nil(t, quiet.StartedAt, "no task reported a start")
	require.Equal(t, time.UnixMicro(9000000).UTC(), *quiet.PublishedAt)
	require.Nil(t, quiet.LastFinishedAt)
}
