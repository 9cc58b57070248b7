package postgres_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

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
