package heartbeats_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/heartbeats"
	"github.com/warrenhq/warren/protocol"
)

// clock is a settable time for the registry.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

func TestRegistryAliveThenDropped(t *testing.T) {
	t.Parallel()
	c := &clock{now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	r := heartbeats.NewRegistry(c.Now)
	beat := protocol.Heartbeat{ID: "b", Name: "w", State: protocol.HeartbeatRunning, Concurrency: 4, InFlight: 1, IntervalMS: 1000}
	require.True(t, r.Apply(beat))
	require.True(t, r.Apply(protocol.Heartbeat{ID: "a", Name: "w", State: protocol.HeartbeatRunning}))
	list := r.List()
	require.Len(t, list, 2)
	require.Equal(t, []string{"a", "b"}, []string{list[0].ID, list[1].ID}, "by name, then id")
	require.True(t, list[1].Alive)
	require.Equal(t, c.now, list[1].LastSeen)

	c.now = c.now.Add(3 * time.Second)
	require.True(t, r.List()[1].Alive, "three intervals of silence are allowed")
	c.now = c.now.Add(time.Millisecond)
	list = r.List()
	require.False(t, list[1].Alive, "past three 1 s intervals")
	require.True(t, list[0].Alive, "the default interval is 5 s")

	c.now = c.now.Add(heartbeats.DropAfter)
	require.Empty(t, r.List(), "silent for five minutes: dropped")

	require.True(t, r.Apply(beat))
	beat.State = protocol.HeartbeatStopping
	require.True(t, r.Apply(beat))
	require.Empty(t, r.List(), "a goodbye drops the worker at once")
}
