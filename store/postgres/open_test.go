package postgres_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/postgres"
	"github.com/warrenhq/warren/store/postgres/pgtest"
)

func TestOpenUnreachableSaysSoInOneLine(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Port 1 on localhost refuses connections; "localhost" may resolve to
	// two addresses, which pgx reports on two lines.
	_, err := postgres.Open(ctx, "postgres://postgres@localhost:1/test?sslmode=disable")
	require.Error(t, err)
	require.Contains(t, err.Error(), "unreachable")
	require.NotContains(t, err.Error(), "\n")
}

func TestOpenMissingSchema(t *testing.T) {
	t.Parallel()
	url := strings.Replace(pgtest.URL(t), "search_path=wt_", "search_path=nope_", 1)

	_, err := postgres.Open(context.Background(), url)
	require.ErrorContains(t, err, "no schema of the search_path exists")
}

func TestMigrateConcurrentOpensApplyOnce(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)

	var wg sync.WaitGroup
	stores := make([]*postgres.Store, 8)
	errs := make([]error, len(stores))
	for i := range stores {
		wg.Go(func() { stores[i], errs[i] = postgres.Open(context.Background(), url) })
	}
	wg.Wait()
	for i, s := range stores {
		require.NoError(t, errs[i])
		t.Cleanup(func() { require.NoError(t, s.Close()) })
	}

	s := stores[0]
	require.NoError(t, s.Migrate(context.Background()), "migrating again is a no-op")
	require.NoError(t, s.Ping(context.Background()))
	files, err := filepath.Glob(filepath.Join("migrations", "*.sql"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	require.Equal(t, int64(len(files)), count(t, url, `SELECT count(*) FROM warren_schema_migrations`),
		"each migration recorded once")
}

func TestSchemasAreIsolated(t *testing.T) {
	t.Parallel()
	a, b := setup(t), setup(t)

	job := a.createJob(t, 3, defaultPolicy)

	_, err := b.store.GetJob(b.ctx, job.ID)
	require.Error(t, err)
	require.Equal(t, int64(0), count(t, b.url, `SELECT count(*) FROM tasks`))
}

// A schema written before migration 0002 migrates forward: its jobs get
// the default task timeout and the reconciler finds their stale tasks.
func TestMigratesVersion1SchemaForward(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	init, err := os.ReadFile(filepath.Join("migrations", "0001_init.sql"))
	require.NoError(t, err)
	for _, stmt := range []string{
		`CREATE TABLE warren_schema_migrations (version bigint PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
		string(init),
		`INSERT INTO warren_schema_migrations (version, name) VALUES (1, '0001_init')`,
		`INSERT INTO jobs (id, type, state, expected_tasks, max_retries, created_at) VALUES ('old', 't', 'running', 1, 3, now())`,
		`INSERT INTO tasks (job_id, task_id, state, payload, queued_at) VALUES ('old', 1, 'queued', '1', now() - interval '2 hours')`,
	} {
		require.NoError(t, pgExec(t, url, stmt), stmt)
	}

	s := open(t, url)
	job, err := s.GetJob(t.Context(), "old")
	require.NoError(t, err)
	require.Zero(t, job.Policy.TaskTimeout)
	report, err := s.ReconcileStale(t.Context(), store.Staleness{Now: time.Now()}, 10)
	require.NoError(t, err)
	require.Equal(t, 1, report.Requeued)
}

// A schema written before migration 0025 (search) migrates forward: its
// jobs are found by their metadata values, queue and tasks' errors; the
// trigram indexes are made where pg_trgm may be created.
func TestMigratesJobsIntoTheSearch(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	files, err := filepath.Glob(filepath.Join("migrations", "*.sql"))
	require.NoError(t, err)
	slices.Sort(files)
	require.NoError(t, pgExec(t, url, `CREATE TABLE warren_schema_migrations (version bigint PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`))
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".sql")
		v, err := strconv.Atoi(name[:4])
		require.NoError(t, err)
		if v >= 25 {
			break
		}
		body, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, pgExec(t, url, string(body)), f)
		require.NoError(t, pgExec(t, url, `INSERT INTO warren_schema_migrations (version, name) VALUES ($1, $2)`, v, name))
	}
	for _, stmt := range []string{
		`INSERT INTO jobs (id, type, state, expected_tasks, queue, metadata, created_at) VALUES ('old', 'Resize', 'running', 1, 'gpu',
			convert_to('{"customer": {"name": "Acme Corp", "tier": 3}, "rush": true, "tags": ["Nightly"]}', 'UTF8'), now())`,
		`INSERT INTO jobs (id, type, state, expected_tasks, metadata, created_at) VALUES ('garbage', 'echo', 'running', 1, '\x7b7b', now())`,
		`INSERT INTO tasks (job_id, task_id, state, payload, error) VALUES ('old', 1, 'failed', '1', 'KeyError: width')`,
	} {
		require.NoError(t, pgExec(t, url, stmt), stmt)
	}

	s := open(t, url)
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

	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	defer func() { _ = conn.Close(context.Background()) }()
	var trgm bool
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm')`).Scan(&trgm))
	rows, err := conn.Query(t.Context(), `SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND indexname LIKE '%trgm%' ORDER BY 1`)
	require.NoError(t, err)
	indexes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	if trgm {
		require.Equal(t, []string{"jobs_search_trgm_idx", "tasks_error_trgm_idx"}, indexes)
	} else {
		require.Empty(t, indexes, "no pg_trgm: the search scans")
	}
}

// A schema written before migration 0028 (published_at) migrates
// forward: the time the relay set becomes the job's published_at, its
// started_at the earliest start its tasks hold, its last_finished_at
// their latest finish (none for a job whose
// tasks reported none).
func TestMigratesStartedAtIntoPublishedAt(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	files, err := filepath.Glob(filepath.Join("migrations", "*.sql"))
	require.NoError(t, err)
	slices.Sort(files)
	require.NoError(t, pgExec(t, url, `CREATE TABLE warren_schema_migrations (version bigint PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`))
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".sql")
		v, err := strconv.Atoi(name[:4])
		require.NoError(t, err)
		if v >= 28 {
			break
		}
		body, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, pgExec(t, url, string(body)), f)
		require.NoError(t, pgExec(t, url, `INSERT INTO warren_schema_migrations (version, name) VALUES ($1, $2)`, v, name))
	}
	for _, stmt := range []string{
		`INSERT INTO jobs (id, type, state, expected_tasks, created_at, started_at) VALUES ('ran', 't', 'running', 2, 'epoch', 'epoch'::timestamptz + interval '9 s')`,
		`INSERT INTO tasks (job_id, task_id, state, payload, started_at, finished_at) VALUES ('ran', 1, 'completed', '1', 'epoch'::timestamptz + interval '5 s', 'epoch'::timestamptz + interval '12 s')`,
		`INSERT INTO tasks (job_id, task_id, state, payload, started_at, finished_at) VALUES ('ran', 2, 'completed', '1', 'epoch'::timestamptz + interval '2 s', 'epoch'::timestamptz + interval '7 s')`,
		`INSERT INTO jobs (id, type, state, expected_tasks, created_at, started_at) VALUES ('quiet', 't', 'running', 1, 'epoch', 'epoch'::timestamptz + interval '9 s')`,
		`INSERT INTO tasks (job_id, task_id, state, payload) VALUES ('quiet', 1, 'failed', '1')`,
	} {
		require.NoError(t, pgExec(t, url, stmt), stmt)
	}

	s := open(t, url)
	ran, err := s.GetJob(t.Context(), "ran")
	require.NoError(t, err)
	require.Equal(t, time.Unix(2, 0).UTC(), *ran.StartedAt, "the earliest task start")
	require.Equal(t, time.Unix(9, 0).UTC(), *ran.PublishedAt, "the relay's time")
	require.Equal(t, time.Unix(12, 0).UTC(), *ran.LastFinishedAt, "the latest task finish")
	quiet, err := s.GetJob(t.Context(), "quiet")
	require.NoError(t, err)
	require.Nil(t, quiet.StartedAt, "no task reported a start")
	require.Equal(t, time.Unix(9, 0).UTC(), *quiet.PublishedAt)
	require.Nil(t, quiet.LastFinishedAt)
}
