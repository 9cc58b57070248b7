package postgres_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
	require.Equal(t, int64(1), count(t, url, `SELECT count(*) FROM warren_schema_migrations`))
}

func TestSchemasAreIsolated(t *testing.T) {
	t.Parallel()
	a, b := setup(t), setup(t)

	job := a.createJob(t, 3, defaultPolicy)

	_, err := b.store.GetJob(b.ctx, job.ID)
	require.Error(t, err)
	require.Equal(t, int64(0), count(t, b.url, `SELECT count(*) FROM tasks`))
}
