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
