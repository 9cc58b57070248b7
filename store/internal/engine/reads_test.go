package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/store"
)

func TestPageSize(t *testing.T) {
	t.Parallel()
	require.Equal(t, store.DefaultPageSize, PageSize(0))
	require.Equal(t, store.DefaultPageSize, PageSize(-1))
	require.Equal(t, 7, PageSize(7))
}

func TestTimelineBucketsStartInOrder(t *testing.T) {
	t.Parallel()
	from := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	span := store.TimelineSpanOf(from, from.Add(9*time.Second), 10)
	buckets := timelineBuckets(span)
	require.Len(t, buckets, 10)
	require.Equal(t, from.Add(9*time.Second), buckets[9].Start)
}
