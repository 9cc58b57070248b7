package heartbeats_test

import (
	"fmt"
	"strings"
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

// largest is a heartbeat as large as protocol.DecodeHeartbeat lets one
// be: 1,024 queues and 1,024 types of 256 bytes.
func largest(id string) protocol.Heartbeat {
	long := make([]string, 1024)
	for i := range long {
		long[i] = strings.Repeat("q", 250) + fmt.Sprintf("%06d", i)
	}
	return protocol.Heartbeat{ID: id, Name: strings.Repeat("n", 256), State: protocol.HeartbeatRunning, Queues: long, Types: long,
		Version: strings.Repeat("v", 256)}
}

// The probe of issue 24 (item 3): 300 forged heartbeats of the largest
// size added 436 MB. The list holds MaxBytes at most; a known worker
// keeps its entry, and a small new one is taken once stale entries go.
func TestRegistryIsBoundedByBytes(t *testing.T) {
	t.Parallel()
	c := &clock{now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	r := heartbeats.NewRegistry(c.Now)
	require.True(t, r.Apply(protocol.Heartbeat{ID: "real", Name: "w", State: protocol.HeartbeatRunning}))
	var taken int
	for i := range 300 {
		if r.Apply(largest(fmt.Sprintf("forged-%d", i))) {
			taken++
		}
	}
	require.LessOrEqual(t, r.Bytes(), int64(heartbeats.MaxBytes))
	require.Less(t, taken, 40, "about 30 of the largest fit in MaxBytes")
	require.Greater(t, taken, 20)
	require.Len(t, r.List(), taken+1)

	require.True(t, r.Apply(protocol.Heartbeat{ID: "real", Name: "w", State: protocol.HeartbeatRunning, InFlight: 2}),
		"a known worker of the same size is refreshed")
	require.False(t, r.Apply(protocol.Heartbeat{ID: "new", Name: strings.Repeat("n", 256), State: protocol.HeartbeatRunning,
		Queues: largest("x").Queues}), "no room for a large new one")

	c.now = c.now.Add(heartbeats.DropAfter + time.Second)
	require.True(t, r.Apply(protocol.Heartbeat{ID: "new", Name: "w2", State: protocol.HeartbeatRunning}), "the stale ones made room")
	require.Len(t, r.List(), 1)
	before := r.Bytes()
	require.True(t, r.Apply(protocol.Heartbeat{ID: "new", Name: "w2", State: protocol.HeartbeatStopping}))
	require.Less(t, r.Bytes(), before)
	require.Zero(t, r.Bytes(), "every byte counted is given back")
}

// An entry belongs to the broker user that registered its id: a goodbye
// or a heartbeat from another user, or without user_id, leaves it alone
// (issue 24, item 3). A heartbeat without user_id registers an entry
// that only heartbeats without one touch.
func TestRegistryEntryBelongsToItsUser(t *testing.T) {
	t.Parallel()
	r := heartbeats.NewRegistry(nil)
	beat := protocol.Heartbeat{ID: "w-1", Name: "w", State: protocol.HeartbeatRunning, InFlight: 1}
	require.True(t, r.ApplyFrom(beat, "worker"))
	require.Equal(t, "worker", r.List()[0].User)

	stop := beat
	stop.State = protocol.HeartbeatStopping
	require.False(t, r.ApplyFrom(stop, "mallory"), "a goodbye from another user")
	require.False(t, r.ApplyFrom(stop, ""), "a goodbye without user_id")
	require.Len(t, r.List(), 1)
	forged := beat
	forged.InFlight, forged.Name = 99, "forged"
	require.False(t, r.ApplyFrom(forged, "mallory"), "a heartbeat from another user")
	require.Equal(t, 1, r.List()[0].InFlight)

	require.True(t, r.ApplyFrom(stop, "worker"), "its own goodbye")
	require.Empty(t, r.List())

	require.True(t, r.ApplyFrom(beat, ""), "without user_id")
	require.False(t, r.ApplyFrom(stop, "worker"), "a user does not take over an entry registered without one")
	require.True(t, r.ApplyFrom(stop, ""))
	require.Empty(t, r.List())
}
