package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

func testTaskTimeline(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("CountsFinishedTasksByBucket", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 8)
		relayAll(t, s)
		start := time.Date(2026, 3, 4, 5, 6, 0, 0, time.UTC)
		at := func(d time.Duration) *time.Time { v := start.Add(d); return &v }
		outcome := func(o store.Outcome, finished time.Duration) store.Outcome {
			o.FinishedAt = at(finished)
			return o
		}
		apply(t, s,
			outcome(completed(job.ID, 1, "1"), -time.Hour), // before the span: first bucket
			outcome(completed(job.ID, 2, "2"), 500*time.Millisecond),
			outcome(failed(job.ID, 3, "boom"), 999*time.Millisecond),
			outcome(completed(job.ID, 4, "4"), 2*time.Second),
			outcome(failed(job.ID, 5, "boom"), 2500*time.Millisecond),
			outcome(completed(job.ID, 6, "6"), time.Hour), // after the span: last bucket
		)
		// Task 7 is still queued; task 8 is cancelled with the job below
		// and is not counted.
		span := store.TimelineSpan{Start: start, Bucket: time.Second, N: 4}
		got, err := s.TaskTimeline(t.Context(), job.ID, span)
		require.NoError(t, err)
		require.Equal(t, []store.TimelineBucket{
			{Start: start, Completed: 2, Failed: 1},
			{Start: start.Add(time.Second)},
			{Start: start.Add(2 * time.Second), Completed: 1, Failed: 1},
			{Start: start.Add(3 * time.Second), Completed: 1},
		}, utcBuckets(got))

		_, err = s.CancelJob(t.Context(), job.ID)
		require.NoError(t, err)
		again, err := s.TaskTimeline(t.Context(), job.ID, span)
		require.NoError(t, err)
		require.Equal(t, utcBuckets(got), utcBuckets(again), "cancelled tasks are not counted")
	})

	t.Run("EmptyJobAndUnknownJob", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		job := newJob(t, s, 3)
		span := store.TimelineSpanOf(job.CreatedAt, job.CreatedAt.Add(5*time.Second), 0)
		got, err := s.TaskTimeline(t.Context(), job.ID, span)
		require.NoError(t, err)
		require.Len(t, got, span.N)
		for _, b := range got {
			require.Zero(t, b.Completed+b.Failed)
		}
		_, err = s.TaskTimeline(t.Context(), "no-such-job", span)
		require.ErrorIs(t, err, warren.ErrNotFound)
	})
}

// utcBuckets returns buckets with their starts in UTC, for comparing.
func utcBuckets(buckets []store.TimelineBucket) []store.TimelineBucket {
	out := make([]store.TimelineBucket, len(buckets))
	for i, b := range buckets {
		b.Start = b.Start.UTC()
		out[i] = b
	}
	return out
}
