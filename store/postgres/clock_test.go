package postgres_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/reconciler"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/postgres"
	"github.com/warrenhq/warren/store/postgres/pgtest"
)

// openWithProcessClock opens one more store on url whose process clock is
// local, closed when the test ends.
func openWithProcessClock(t *testing.T, url string, local func() time.Time) *postgres.Store {
	t.Helper()
	s, err := postgres.OpenWithProcessClock(t.Context(), url, local)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// Two servers share the database, the reconciling one's clock three hours
// ahead of the relaying one's. A task the relay published a moment ago
// runs well within its timeout: the reconciler must not take it for lost.
func TestClockSkewBetweenServersTakesNoTaskForLost(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ahead := func() time.Time { return time.Now().Add(3 * time.Hour) }
	relaying := openWithProcessClock(t, url, time.Now)
	reconciling := openWithProcessClock(t, url, ahead)
	b := &testBundle{ctx: t.Context(), store: relaying, url: url}
	job := b.createJob(t, 2, warren.Policy{Reduce: "collect", MaxRetries: 3, TaskTimeout: time.Minute})
	n, err := relaying.RelayBatch(t.Context(), 10, publishAll)
	require.NoError(t, err)
	require.Equal(t, 2, n)

	r, err := reconciler.New(reconciler.Config{Store: reconciling, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	report, err := r.RunOnce(t.Context())
	require.NoError(t, err)
	require.Zero(t, report.Requeued+report.Failed, "a task published a moment ago is not lost, whatever the reconciling server's clock says")
	tasks, _, err := reconciling.ListTasks(t.Context(), job.ID, store.ListTasksOpts{})
	require.NoError(t, err)
	for _, task := range tasks {
		require.Equal(t, warren.TaskQueued, task.State, "task %d", task.TaskID)
		require.Zero(t, task.Attempts, "task %d", task.TaskID)
	}
}

// The other way round: the relaying server's clock is three hours ahead.
// A task it published and whose run was lost is found once its timeout
// has passed on the store's clock, not three hours later.
func TestClockSkewBetweenServersDelaysNoLostTask(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	relaying := openWithProcessClock(t, url, func() time.Time { return time.Now().Add(3 * time.Hour) })
	reconciling := openWithProcessClock(t, url, time.Now)
	b := &testBundle{ctx: t.Context(), store: relaying, url: url}
	job := b.createJob(t, 1, warren.Policy{Reduce: "collect", MaxRetries: 3, TaskTimeout: time.Minute})
	n, err := relaying.RelayBatch(t.Context(), 10, publishAll)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	now, err := reconciling.Now(t.Context())
	require.NoError(t, err)
	report, err := reconciling.ReconcileStale(t.Context(), store.Staleness{Now: now.Add(2 * time.Minute)}, 10)
	require.NoError(t, err)
	require.Equal(t, 1, report.Requeued, "lost two minutes after its publish, with a timeout of one")
	tasks, _, err := reconciling.ListTasks(t.Context(), job.ID, store.ListTasksOpts{})
	require.NoError(t, err)
	require.Equal(t, warren.TaskPending, tasks[0].State)
}

// Stores whose processes' clocks are hours apart tell the same time: the
// database's, which they write with. Each reading is off the database's
// clock by at most half the round trip of its last sync: a second is
// plenty, hours are the bug.
func TestStoresOnOneDatabaseShareItsClock(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	behind := openWithProcessClock(t, url, func() time.Time { return time.Now().Add(-5 * time.Hour) })
	ahead := openWithProcessClock(t, url, func() time.Time { return time.Now().Add(7 * time.Hour) })
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	defer func() { _ = conn.Close(t.Context()) }()
	var db time.Time
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT clock_timestamp()`).Scan(&db))
	for name, s := range map[string]*postgres.Store{"behind": behind, "ahead": ahead} {
		now, err := s.Now(t.Context())
		require.NoError(t, err)
		require.WithinDuration(t, db, now, time.Second, "%s: the database's clock, not its process's", name)
	}
	before, err := ahead.Now(t.Context())
	require.NoError(t, err)
	job, _, err := behind.CreateJob(t.Context(), store.NewJob{Type: "t", Policy: defaultPolicy}, payloads(1))
	require.NoError(t, err)
	after, err := ahead.Now(t.Context())
	require.NoError(t, err)
	require.WithinRange(t, job.CreatedAt, before.Add(-time.Second), after.Add(time.Second),
		"a job created on one server was created at the other's time")
}
