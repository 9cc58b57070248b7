package warren_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
)

// A job's rate counts finished tasks (completed and failed) from its
// first task's start: to its latest finish while it runs, so a job of
// 3-second tasks shows the pace they finish at however long ago the last
// one did; to its close once closed.
func TestJobRate(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { tm := t0.Add(d); return &tm }
	for _, c := range []struct {
		name string
		job  warren.Job
		want float64 // 0: not measurable
	}{
		{"nothing started", warren.Job{State: warren.JobRunning, ExpectedTasks: 10}, 0},
		{"started, nothing finished", warren.Job{State: warren.JobRunning, ExpectedTasks: 10, StartedAt: at(0)}, 0},
		// 10 workers, 3-s tasks: 10 finished 3 s after the first start.
		{"slow tasks while running", warren.Job{State: warren.JobRunning, ExpectedTasks: 100, CompletedTasks: 9, FailedTasks: 1,
			StartedAt: at(0), LastFinishedAt: at(3 * time.Second)}, 10.0 / 3},
		{"no time between", warren.Job{State: warren.JobRunning, ExpectedTasks: 2, CompletedTasks: 1,
			StartedAt: at(time.Second), LastFinishedAt: at(time.Second)}, 0},
		// 100,000 tasks, first started at 0, closed at 7.3 s: published
		// at 0.4 s changes nothing.
		{"closed: the whole run", warren.Job{State: warren.JobCompleted, ExpectedTasks: 100000, CompletedTasks: 100000,
			StartedAt: at(0), PublishedAt: at(6880 * time.Millisecond), LastFinishedAt: at(7200 * time.Millisecond),
			FinishedAt: at(7300 * time.Millisecond)}, 100000 / 7.3},
		{"closed, no start reported", warren.Job{State: warren.JobFailed, ExpectedTasks: 1, FailedTasks: 1,
			LastFinishedAt: at(time.Second), FinishedAt: at(time.Second)}, 0},
	} {
		got, ok := c.job.Rate()
		if c.want == 0 {
			require.False(t, ok, c.name)
			continue
		}
		require.True(t, ok, c.name)
		require.InDelta(t, c.want, got, 1e-9, c.name)
	}
}
