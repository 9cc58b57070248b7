package queuestats_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/queuestats"
)

func TestGrowthOverWindows(t *testing.T) {
	t.Parallel()
	g := queuestats.NewGrowth()
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	_, ok := g.Since("q", 5, time.Minute, start)
	require.False(t, ok, "no sample yet")
	for i := range 61 { // 15 minutes of samples, depth growing by one per sample
		g.Record("q", int64(i), start.Add(time.Duration(i)*queuestats.SampleInterval))
	}
	now := start.Add(15 * time.Minute)
	n, ok := g.Since("q", 60, time.Minute, now)
	require.True(t, ok)
	require.Equal(t, int64(4), n, "four samples a minute")
	n, ok = g.Since("q", 60, 15*time.Minute, now)
	require.True(t, ok)
	require.Equal(t, int64(60), n)
	n, ok = g.Since("q", 0, time.Minute, now)
	require.True(t, ok)
	require.Equal(t, int64(-56), n, "a purged queue shrank")

	_, ok = g.Since("q", 60, time.Minute, now.Add(time.Hour))
	require.False(t, ok, "no sample near the window's start: not known")
	_, ok = g.Since("other", 1, time.Minute, now)
	require.False(t, ok)
}
