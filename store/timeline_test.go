package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/store"
)

func TestTimelineSpanOfPicksTheNarrowestRoundWidthThatFits(t *testing.T) {
	t.Parallel()
	from := time.Date(2026, 1, 2, 3, 4, 5, 600_000_000, time.UTC)
	for _, tc := range []struct {
		life  time.Duration
		width time.Duration
		n     int
	}{
		{0, time.Second, 1},
		{30 * time.Second, time.Second, 31},
		{59 * time.Second, time.Second, 60},
		{90 * time.Second, 2 * time.Second, 46},
		{10 * time.Minute, 15 * time.Second, 41},
		{3 * time.Hour, 5 * time.Minute, 37},
		{40 * 24 * time.Hour, 24 * time.Hour, 41},
		{100 * 24 * time.Hour, 2 * 24 * time.Hour, 51},
	} {
		span := store.TimelineSpanOf(from, from.Add(tc.life), 0)
		require.Equal(t, tc.width, span.Bucket, "life %s", tc.life)
		require.Equal(t, tc.n, span.N, "life %s", tc.life)
		require.LessOrEqual(t, span.N, store.MaxTimelineBuckets)
		require.Equal(t, from.Truncate(tc.width), span.Start)
		require.Equal(t, span.N-1, span.Index(from.Add(tc.life)), "the end is in the last bucket")
	}
}

func TestTimelineSpanIndexClamps(t *testing.T) {
	t.Parallel()
	from := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	span := store.TimelineSpanOf(from, from.Add(9*time.Second), 10)
	require.Equal(t, store.TimelineSpan{Start: from, Bucket: time.Second, N: 10}, span)
	require.Equal(t, 0, span.Index(from.Add(-time.Hour)))
	require.Equal(t, 3, span.Index(from.Add(3500*time.Millisecond)))
	require.Equal(t, 9, span.Index(from.Add(time.Hour)))

	backwards := store.TimelineSpanOf(from, from.Add(-time.Minute), 10)
	require.Equal(t, 1, backwards.N, "an end before the start is a one-bucket span")
}
