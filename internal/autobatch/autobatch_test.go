package autobatch_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/autobatch"
	"github.com/warrenhq/warren/store"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// ran is an outcome of job id whose handler ran d, starting at start.
func ran(id string, start, d time.Duration) store.Outcome {
	s, f := t0.Add(start), t0.Add(start+d)
	return store.Outcome{JobID: id, StartedAt: &s, FinishedAt: &f}
}

func pending(id string, n int) store.PendingJob { return store.PendingJob{ID: id, Pending: n} }

// size is Sizer.Size's batch size alone, for a job without a limit.
func size(t *testing.T, s *autobatch.Sizer, j store.PendingJob, atLeast bool, consumers int) int {
	t.Helper()
	b, most := s.Size(j, atLeast, consumers)
	require.Equal(t, j.Pending, most, "no limit once durations are known")
	return b
}

// Until a job's durations are known, its tasks go one per message: a
// probe of one message per consumer slot, then nothing until the first
// durations come (which wakes the relay) or ProbeWait has passed.
func TestAProbeGoesFirstUntilAJobsDurationsAreKnown(t *testing.T) {
	t.Parallel()
	now := t0
	known := 0
	s := autobatch.New(autobatch.Config{Now: func() time.Time { return now }, OnKnown: func() { known++ }})
	b, most := s.Size(pending("a", 500), true, 4)
	require.Equal(t, [2]int{1, 64}, [2]int{b, most}, "4 consumers x 16 slots, one task each")
	b, most = s.Size(pending("a", 436), true, 4)
	require.Equal(t, [2]int{1, 0}, [2]int{b, most}, "the probe is out: wait")
	s.Observe([]store.Outcome{{JobID: "a"}}) // a dead letter, say: no times
	_, most = s.Size(pending("a", 436), true, 4)
	require.Zero(t, most, "an outcome without times tells nothing")
	require.Zero(t, known)

	now = now.Add(autobatch.DefaultProbeWait + time.Millisecond)
	b, most = s.Size(pending("a", 436), true, 4)
	require.Equal(t, [2]int{1, 436}, [2]int{b, most}, "no durations after ProbeWait: slow tasks, one per message")

	s.Observe([]store.Outcome{ran("a", 0, time.Microsecond)})
	require.Equal(t, 1, known, "the first durations wake the relay")
	require.Equal(t, autobatch.DefaultMax, size(t, s, pending("a", 400), true, 4))
	s.Observe([]store.Outcome{ran("a", 0, time.Microsecond)})
	require.Equal(t, 1, known, "only the first")

	b, most = s.Size(pending("small", 5), false, 0)
	require.Equal(t, [2]int{1, 5}, [2]int{b, most}, "no consumers yet: a probe of one consumer's slots, cut to what the job has")
}

func TestSizeFitsTheTargetOfWork(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		task time.Duration
		want int
	}{
		{"no-op tasks: the maximum", 2 * time.Microsecond, autobatch.DefaultMax},
		{"1 ms tasks: 10 to a message", time.Millisecond, 10},
		{"3 ms tasks: 3", 3 * time.Millisecond, 3},
		{"20 ms tasks: one per message", 20 * time.Millisecond, 1},
		{"a task that took no time at all", 0, autobatch.DefaultMax},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := autobatch.New(autobatch.Config{})
			s.Observe([]store.Outcome{ran("a", 0, c.task), ran("a", c.task, c.task)})
			require.Equal(t, c.want, size(t, s, pending("a", 1000), true, 4))
		})
	}
}

func TestSizeLeavesAMessageForEverySlotAtTheEnd(t *testing.T) {
	t.Parallel()
	s := autobatch.New(autobatch.Config{})
	s.Observe([]store.Outcome{ran("a", 0, time.Microsecond)})
	// 4 consumers of 16 slots: 64 slots.
	require.Equal(t, autobatch.DefaultMax, size(t, s, pending("a", 500), true, 4), "more to come: no cut")
	require.Equal(t, 8, size(t, s, pending("a", 500), false, 4), "500 left over 64 slots")
	require.Equal(t, 1, size(t, s, pending("a", 40), false, 4), "fewer tasks than slots")
	require.Equal(t, autobatch.DefaultMax, size(t, s, pending("a", 500), false, 0), "no consumers known: no cut")
}

func TestSizeFollowsAJobsDurationsAndKeepsJobsApart(t *testing.T) {
	t.Parallel()
	s := autobatch.New(autobatch.Config{})
	s.Observe([]store.Outcome{ran("fast", 0, 100*time.Microsecond), ran("slow", 0, 50*time.Millisecond)})
	require.Equal(t, autobatch.DefaultMax, size(t, s, pending("fast", 1000), true, 1))
	require.Equal(t, 1, size(t, s, pending("slow", 1000), true, 1))

	// The fast job's tasks turn slow: the mean follows within tens of
	// results.
	var slower []store.Outcome
	for i := range 50 {
		slower = append(slower, ran("fast", time.Duration(i)*5*time.Millisecond, 5*time.Millisecond))
	}
	s.Observe(slower)
	require.Equal(t, 2, size(t, s, pending("fast", 1000), true, 1))

	s.Forget("fast")
	_, ok := s.Mean("fast")
	require.False(t, ok, "forgotten: unknown again")
}

// A batch handler's call reports the same times for all its tasks: the
// call's time is shared between them, not counted once per task.
func TestObserveSharesABatchCallsTimeBetweenItsTasks(t *testing.T) {
	t.Parallel()
	s := autobatch.New(autobatch.Config{})
	call := make([]store.Outcome, 40)
	for i := range call {
		call[i] = ran("a", 0, 8*time.Millisecond)
	}
	s.Observe(call)
	mean, ok := s.Mean("a")
	require.True(t, ok)
	require.Equal(t, 200*time.Microsecond, mean)
	require.Equal(t, 50, size(t, s, pending("a", 1000), true, 1))
}

func TestEstimatesOfQuietJobsAreDropped(t *testing.T) {
	t.Parallel()
	now := t0
	s := autobatch.New(autobatch.Config{Now: func() time.Time { return now }})
	s.Observe([]store.Outcome{ran("old", 0, time.Millisecond)})
	now = now.Add(2 * time.Hour)
	s.Observe([]store.Outcome{ran("new", 0, time.Millisecond)})
	_, ok := s.Mean("old")
	require.False(t, ok, "no result for two hours: dropped")
	_, ok = s.Mean("new")
	require.True(t, ok)
}
