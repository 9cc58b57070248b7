package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/store"
)

func TestDefaultCutoff(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	cutoff, ok := defaultCutoff(store.Expiry{Now: now, Retention: time.Hour})
	require.True(t, ok)
	require.Equal(t, now.Add(-time.Hour), cutoff)
	for _, forever := range []time.Duration{0, -1} {
		_, ok := defaultCutoff(store.Expiry{Now: now, Retention: forever})
		require.False(t, ok, "retention %s", forever)
	}
}

// pickExpired keeps only the expired jobs, the first expired first, ties
// by id, at most limit of them.
func TestPickExpired(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	e := store.Expiry{Now: now, Retention: 10 * time.Hour}
	jobs := []ExpiringJob{
		{ID: "default-just-now", FinishedAt: now.Add(-10 * time.Hour)},                       // expired at now
		{ID: "default-not-yet", FinishedAt: now.Add(-10*time.Hour + time.Microsecond)},       // a microsecond short
		{ID: "own-long-ago", FinishedAt: now.Add(-3 * time.Hour), Retention: time.Hour},      // expired 2 h ago
		{ID: "own-not-yet", FinishedAt: now.Add(-20 * time.Hour), Retention: 21 * time.Hour}, // in an hour
		{ID: "b-tie", FinishedAt: now.Add(-11 * time.Hour)},                                  // expired 1 h ago
		{ID: "a-tie", FinishedAt: now.Add(-2 * time.Hour), Retention: time.Hour},             // expired 1 h ago
	}
	require.Equal(t, []string{"own-long-ago", "a-tie", "b-tie", "default-just-now"}, pickExpired(e, jobs, 10))
	require.Equal(t, []string{"own-long-ago", "a-tie"}, pickExpired(e, jobs, 2))
	require.Len(t, pickExpired(e, jobs, 0), 4, "limit 0 is the default page size")

	forever := store.Expiry{Now: now, Retention: -1}
	require.Equal(t, []string{"own-long-ago", "a-tie"}, pickExpired(forever, jobs, 10),
		"without a default retention only jobs with their own expire")
	require.Empty(t, pickExpired(e, nil, 10))
}

// planPurge deletes up to the limit, job after job, each from its first
// task left, and forgets the jobs it empties, empty ones whatever the
// limit.
func TestPlanPurge(t *testing.T) {
	t.Parallel()
	jobs := []DeletedJob{
		{ID: "a", Tasks: 3, Purged: 1},
		{ID: "empty", Tasks: 0},
		{ID: "b", Tasks: 10},
		{ID: "c", Tasks: 4},
	}
	require.Equal(t, []PurgeRange{
		{JobID: "a", After: 1, Through: 3, Last: true},
		{JobID: "empty", After: 0, Through: 0, Last: true},
		{JobID: "b", After: 0, Through: 5, Last: false},
	}, planPurge(jobs, 7))
	require.Equal(t, []PurgeRange{
		{JobID: "a", After: 1, Through: 3, Last: true},
		{JobID: "empty", After: 0, Through: 0, Last: true},
	}, planPurge(jobs, 2), "an empty job costs nothing")
	require.Equal(t, []PurgeRange{
		{JobID: "a", After: 1, Through: 3, Last: true},
		{JobID: "empty", After: 0, Through: 0, Last: true},
		{JobID: "b", After: 0, Through: 10, Last: true},
		{JobID: "c", After: 0, Through: 4, Last: true},
	}, planPurge(jobs, 0), "limit 0 is the default page size")
	require.Empty(t, planPurge(nil, 10))
}
