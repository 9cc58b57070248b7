package webhooks_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/webhooks"
)

func TestScheduleBacksOffUntilADayHasPassed(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var s webhooks.Schedule
	at := created
	var waits []time.Duration
	for attempt := 1; ; attempt++ {
		next, ok := s.Next(created, attempt, at, 0.5)
		if !ok {
			require.Equal(t, created.Add(24*time.Hour), at, "the last attempt is a day after the delivery was made")
			break
		}
		waits = append(waits, next.Sub(at))
		at = next
	}
	require.Equal(t, []time.Duration{10 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute, 15 * time.Minute, time.Hour},
		waits[:6], "10 s, 30 s, 1 min, 5 min, 15 min, 1 h")
	for _, w := range waits[6 : len(waits)-1] {
		require.Equal(t, time.Hour, w, "then every hour")
	}
	require.LessOrEqual(t, waits[len(waits)-1], time.Hour, "the last wait is cut short at the deadline")
	require.Len(t, waits, 6+22+1)

	jittered := webhooks.Schedule{Jitter: 0.2}
	low, _ := jittered.Next(created, 1, created, 0)
	high, _ := jittered.Next(created, 1, created, 0.999999)
	require.Equal(t, 8*time.Second, low.Sub(created))
	require.InDelta(t, float64(12*time.Second), float64(high.Sub(created)), float64(time.Millisecond))

	short := webhooks.Schedule{Delays: []time.Duration{time.Second}, MaxAge: time.Minute}
	next, ok := short.Next(created, 100, created.Add(59*time.Second+500*time.Millisecond), 0)
	require.True(t, ok)
	require.Equal(t, created.Add(time.Minute), next)
	_, ok = short.Next(created, 101, created.Add(time.Minute), 0)
	require.False(t, ok)
}
