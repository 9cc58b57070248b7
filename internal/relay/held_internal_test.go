package relay

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/store"
)

// woken reports whether r's loop was woken, and takes the wake.
func woken(r *Relay) bool {
	select {
	case <-r.freed[0]:
		return true
	default:
		return false
	}
}

// An outcome wakes the relay only when its job's cap held tasks back in
// a round, once per hold; other jobs' outcomes do not.
func TestRecordedWakesOnlyForHeldJobs(t *testing.T) {
	t.Parallel()
	r := &Relay{freed: []chan struct{}{make(chan struct{}, 1)}}
	r.Recorded([]store.Outcome{{JobID: "a"}})
	require.False(t, woken(r), "no job is held")

	r.hold("b", 1)
	r.hold("b", 2)
	r.Recorded([]store.Outcome{{JobID: "a"}, {JobID: "a"}})
	require.False(t, woken(r), "a's outcomes free no room a round held back")
	r.Recorded([]store.Outcome{{JobID: "a"}, {JobID: "b"}, {JobID: "b"}})
	require.True(t, woken(r), "b's outcome frees room")
	r.Recorded([]store.Outcome{{JobID: "b"}})
	require.False(t, woken(r), "until a round holds b back again")
	require.Zero(t, r.heldJobs.Load())

	r.hold("c", 3)
	r.ForgetJob("c")
	r.Recorded([]store.Outcome{{JobID: "c"}})
	require.False(t, woken(r), "c closed")
	require.Zero(t, r.heldJobs.Load())
}

// A job no round held back for heldRounds rounds (it closed on another
// server, say) is dropped; one held back since stays.
func TestHeldJobsArePrunedAfterRoundsWithoutThem(t *testing.T) {
	t.Parallel()
	r := &Relay{freed: []chan struct{}{make(chan struct{}, 1)}}
	r.hold("gone", 1)
	r.hold("still", 1)
	r.hold("still", heldRounds+1)
	r.pruneHeld(heldRounds + 1)
	require.Equal(t, int64(2), r.heldJobs.Load(), "pruned only every heldRounds rounds")
	r.pruneHeld(2 * heldRounds)
	require.Equal(t, int64(1), r.heldJobs.Load())
	r.Recorded([]store.Outcome{{JobID: "gone"}})
	require.False(t, woken(r), "gone was dropped")
	r.Recorded([]store.Outcome{{JobID: "still"}})
	require.True(t, woken(r))
}
