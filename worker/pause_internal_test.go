package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A pause lasts its lease from its last message: refreshed, it goes on;
// not refreshed (a resume the worker missed), it ends by itself.
func TestPauseSetHoldsForTheLeaseFromTheLastMessage(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	p := newPauseSet(30*time.Second, clock.Now)
	require.False(t, p.holds("j1", "default"))
	p.pause(pauseKey{job: "j1"})
	p.pause(pauseKey{queue: "q1"})
	require.True(t, p.holds("j1", "default"), "the job is paused")
	require.True(t, p.holds("j2", "q1"), "its queue is paused")
	require.False(t, p.holds("j2", "default"))

	clock.now = clock.now.Add(20 * time.Second)
	p.pause(pauseKey{job: "j1"}) // a refresh
	clock.now = clock.now.Add(20 * time.Second)
	require.True(t, p.holds("j1", "default"), "refreshed 20 s ago")
	require.False(t, p.holds("j2", "q1"), "not refreshed for 40 s: the lease ended")

	p.resume(pauseKey{job: "j1"})
	require.False(t, p.holds("j1", "default"), "resumed")
	p.resume(pauseKey{queue: "never-paused"})
}
