package backoff

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDelayDoublesUpToMax(t *testing.T) {
	t.Parallel()
	p := Policy{Min: 100 * time.Millisecond, Max: time.Second}
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, w := range want {
		require.Equal(t, w*time.Millisecond, p.Delay(i+1), "retry %d", i+1)
	}
	require.Equal(t, 100*time.Millisecond, p.Delay(0), "before the first retry: Min")
}

func TestJitterStaysWithinHalfEitherSide(t *testing.T) {
	t.Parallel()
	p := Policy{Min: 100 * time.Millisecond, Max: time.Second, Jitter: 0.5}
	for range 1000 {
		d := p.Delay(2)
		require.GreaterOrEqual(t, d, 100*time.Millisecond)
		require.LessOrEqual(t, d, 300*time.Millisecond)
	}
}

func TestBackoffCountsFailuresUntilReset(t *testing.T) {
	t.Parallel()
	b := New(Policy{Min: time.Millisecond, Max: 4 * time.Millisecond})
	require.Equal(t, time.Millisecond, b.Next())
	require.Equal(t, 2*time.Millisecond, b.Next())
	require.Equal(t, 4*time.Millisecond, b.Next())
	require.Equal(t, 4*time.Millisecond, b.Next())
	b.Reset()
	require.Equal(t, time.Millisecond, b.Next())
}

func TestSleepStopsWithTheContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.False(t, Sleep(ctx, time.Hour))
	require.True(t, Sleep(context.Background(), time.Millisecond))
}
