package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

func TestExpiresAt(t *testing.T) {
	t.Parallel()
	finished := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	const week = 7 * 24 * time.Hour
	tests := []struct {
		name  string
		state warren.JobState
		own   time.Duration
		def   time.Duration
		want  time.Time
		ok    bool
	}{
		{"default", warren.JobCompleted, 0, week, finished.Add(week), true},
		{"its own, shorter", warren.JobFailed, time.Hour, week, finished.Add(time.Hour), true},
		{"its own, longer", warren.JobCancelled, 30 * 24 * time.Hour, week, finished.Add(30 * 24 * time.Hour), true},
		{"default kept forever", warren.JobCompleted, 0, -1, time.Time{}, false},
		{"default 0 keeps forever too", warren.JobCompleted, 0, 0, time.Time{}, false},
		{"its own applies when the default keeps forever", warren.JobCompleted, time.Hour, -1, finished.Add(time.Hour), true},
		{"open", warren.JobRunning, time.Hour, week, time.Time{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			j := warren.Job{State: tt.state, FinishedAt: &finished, Policy: warren.Policy{Retention: tt.own}}
			got, ok := store.ExpiresAt(j, tt.def)
			require.Equal(t, tt.ok, ok)
			require.Equal(t, tt.want, got)
		})
	}
	_, ok := store.ExpiresAt(warren.Job{State: warren.JobCompleted}, week)
	require.False(t, ok, "a closed job without finished_at never expires")
}

func TestDefaultCutoff(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	cutoff, ok := store.Expiry{Now: now, Retention: time.Hour}.DefaultCutoff()
	require.True(t, ok)
	require.Equal(t, now.Add(-time.Hour), cutoff)
	for _, forever := range []time.Duration{0, -1} {
		_, ok := store.Expiry{Now: now, Retention: forever}.DefaultCutoff()
		require.False(t, ok, "retention %s", forever)
	}
}

// PickExpired keeps only the expired jobs, the first expired first, ties
// by id, at most limit of them.
func TestPickExpired(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	e := store.Expiry{Now: now, Retention: 10 * time.Hour}
	jobs := []store.ExpiringJob{
		{ID: "default-just-now", FinishedAt: now.Add(-10 * time.Hour)},                       // expired at now
		{ID: "default-not-yet", FinishedAt: now.Add(-10*time.Hour + time.Microsecond)},       // a microsecond short
		{ID: "own-long-ago", FinishedAt: now.Add(-3 * time.Hour), Retention: time.Hour},      // expired 2 h ago
		{ID: "own-not-yet", FinishedAt: now.Add(-20 * time.Hour), Retention: 21 * time.Hour}, // in an hour
		{ID: "b-tie", FinishedAt: now.Add(-11 * time.Hour)},                                  // expired 1 h ago
		{ID: "a-tie", FinishedAt: now.Add(-2 * time.Hour), Retention: time.Hour},             // expired 1 h ago
	}
	require.Equal(t, []string{"own-long-ago", "a-tie", "b-tie", "default-just-now"}, e.PickExpired(jobs, 10))
	require.Equal(t, []string{"own-long-ago", "a-tie"}, e.PickExpired(jobs, 2))
	require.Len(t, e.PickExpired(jobs, 0), 4, "limit 0 is the default page size")

	forever := store.Expiry{Now: now, Retention: -1}
	require.Equal(t, []string{"own-long-ago", "a-tie"}, forever.PickExpired(jobs, 10),
		"without a default retention only jobs with their own expire")
	require.Empty(t, e.PickExpired(nil, 10))
}

// PlanPurge deletes up to the limit, job after job, each from its first
// task left, and forgets the jobs it empties, empty ones whatever the
// limit.
func TestPlanPurge(t *testing.T) {
	t.Parallel()
	jobs := []store.DeletedJob{
		{ID: "a", Tasks: 3, Purged: 1},
		{ID: "empty", Tasks: 0},
		{ID: "b", Tasks: 10},
		{ID: "c", Tasks: 4},
	}
	require.Equal(t, []store.PurgeRange{
		{JobID: "a", After: 1, Through: 3, Last: true},
		{JobID: "empty", After: 0, Through: 0, Last: true},
		{JobID: "b", After: 0, Through: 5, Last: false},
	}, store.PlanPurge(jobs, 7))
	require.Equal(t, []store.PurgeRange{
		{JobID: "a", After: 1, Through: 3, Last: true},
		{JobID: "empty", After: 0, Through: 0, Last: true},
	}, store.PlanPurge(jobs, 2), "an empty job costs nothing")
	require.Equal(t, []store.PurgeRange{
		{JobID: "a", After: 1, Through: 3, Last: true},
		{JobID: "empty", After: 0, Through: 0, Last: true},
		{JobID: "b", After: 0, Through: 10, Last: true},
		{JobID: "c", After: 0, Through: 4, Last: true},
	}, store.PlanPurge(jobs, 0), "limit 0 is the default page size")
	require.Empty(t, store.PlanPurge(nil, 10))
}
