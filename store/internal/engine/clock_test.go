package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeTime is a settable clock.
type fakeTime struct {
	mu  sync.Mutex
	now time.Time
}

func (f *fakeTime) Now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }

func (f *fakeTime) Add(d time.Duration) { f.mu.Lock(); f.now = f.now.Add(d); f.mu.Unlock() }

// clockBundle is a clock whose process clock is local, three hours ahead
// of the database's clock db, each reading of which takes trip (or fails
// with err).
type clockBundle struct {
	local, db *fakeTime
	trip      time.Duration
	err       error
	reads     int
	clock     *Clock
}

func setupClock(t *testing.T) *clockBundle {
	t.Helper()
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	b := &clockBundle{local: &fakeTime{now: start.Add(3 * time.Hour)}, db: &fakeTime{now: start}}
	b.clock = newClock(func(context.Context) (time.Time, error) {
		b.reads++
		b.pass(b.trip / 2)
		defer b.pass(b.trip / 2)
		if b.err != nil {
			return time.Time{}, b.err
		}
		return b.db.Now(), nil
	}, Options{Local: b.local.Now})
	return b
}

// pass moves both clocks on by d.
func (b *clockBundle) pass(d time.Duration) {
	b.local.Add(d)
	b.db.Add(d)
}

// The clock tells the database's time, however far off the process's
// clock is, from the reading of it half way through the round trip.
func TestClockTellsTheDatabasesTime(t *testing.T) {
	t.Parallel()
	b := setupClock(t)
	require.Equal(t, b.local.Now(), b.clock.Now(), "the process's clock until the first sync")
	b.trip = 10 * time.Millisecond
	require.NoError(t, b.clock.Sync(t.Context()))
	require.Equal(t, b.db.Now(), b.clock.Now(), "read half way through the round trip")
	b.pass(17 * time.Second)
	require.Equal(t, b.db.Now(), b.clock.Now(), "carried by the process's clock")
	require.Equal(t, time.UTC, b.clock.Now().Location())
	b.pass(time.Nanosecond)
	require.Zero(t, b.clock.Now().Nanosecond()%1000, "to the microsecond")
}

// The database's clock is read again once a minute, not before.
func TestClockSyncsOnceAMinute(t *testing.T) {
	t.Parallel()
	b := setupClock(t)
	require.NoError(t, b.clock.Sync(t.Context()))
	require.Equal(t, 1, b.reads)
	b.pass(syncEvery - time.Microsecond)
	require.NoError(t, b.clock.Sync(t.Context()))
	require.Equal(t, 1, b.reads, "not a minute yet")
	b.pass(time.Microsecond)
	b.local.Add(time.Second) // the process's clock ran fast
	last := b.clock.Now()
	require.Equal(t, b.db.Now().Add(time.Second), last)
	require.NoError(t, b.clock.Sync(t.Context()))
	require.Equal(t, 2, b.reads)
	require.Equal(t, last, b.clock.Now(), "a reading does not go back")
	b.pass(time.Second / 2)
	require.Equal(t, last, b.clock.Now(), "it stands still until the database's clock catches up")
	b.pass(time.Second)
	require.Equal(t, b.db.Now(), b.clock.Now())

	b.pass(syncEvery)
	b.db.Add(-time.Hour) // the database's clock was set back
	require.NoError(t, b.clock.Sync(t.Context()))
	require.Equal(t, b.db.Now(), b.clock.Now(), "a step back of more than maxStandStill is followed")
}

// A failed reading fails only the first sync; after one, the last
// reading stays in use and the next sync tries again. A reading slower
// than maxSyncRoundTrip does not replace a faster one.
func TestClockKeepsItsLastGoodReading(t *testing.T) {
	t.Parallel()
	b := setupClock(t)
	b.err = errors.New("down")
	require.ErrorIs(t, b.clock.Sync(t.Context()), b.err)
	b.err = nil
	require.NoError(t, b.clock.Sync(t.Context()))
	b.pass(syncEvery)
	b.db.Add(time.Second) // the database's clock was set forward

	b.err = errors.New("down")
	require.NoError(t, b.clock.Sync(t.Context()))
	require.Equal(t, b.db.Now().Add(-time.Second), b.clock.Now(), "the last reading stays")
	b.err = nil
	b.trip = maxSyncRoundTrip + 2*time.Microsecond
	require.NoError(t, b.clock.Sync(t.Context()))
	require.Equal(t, b.db.Now().Add(-time.Second), b.clock.Now(), "too slow a reading is left")
	b.trip = 0
	require.NoError(t, b.clock.Sync(t.Context()))
	require.Equal(t, 5, b.reads, "every sync after a failed or slow one reads again")
	require.Equal(t, b.db.Now(), b.clock.Now())
}

// A test's clock (Options.Clock) is the clock: the database is never read.
func TestClockOfATestIsTheClock(t *testing.T) {
	t.Parallel()
	fixed := &fakeTime{now: time.Date(2030, 1, 2, 3, 4, 5, 6789, time.Local)}
	c := newClock(func(context.Context) (time.Time, error) {
		t.Error("the database's clock was read")
		return time.Time{}, nil
	}, Options{Clock: fixed.Now})
	require.NoError(t, c.Sync(t.Context()))
	require.Equal(t, fixed.Now().UTC().Truncate(time.Microsecond), c.Now())
	fixed.Add(-time.Hour)
	require.Equal(t, fixed.Now().UTC().Truncate(time.Microsecond), c.Now(), "a test may turn it back")
}

// Of concurrent callers once a minute has passed, one reads the
// database's clock; the others go on with the last reading. Before the
// first reading, every caller reads it: none may go on without one.
func TestClockSyncsOnceForConcurrentCallers(t *testing.T) {
	t.Parallel()
	local := &fakeTime{now: time.Now()}
	var (
		mu      sync.Mutex
		n       int
		release = make(chan struct{})
		reading = make(chan struct{})
	)
	c := newClock(func(context.Context) (time.Time, error) {
		mu.Lock()
		n++
		again := n > 1
		mu.Unlock()
		if again {
			reading <- struct{}{}
			<-release
		}
		return local.Now(), nil
	}, Options{Local: local.Now})
	require.NoError(t, c.Sync(t.Context()))
	local.Add(syncEvery)
	var callers sync.WaitGroup
	callers.Go(func() { require.NoError(t, c.Sync(t.Context())) })
	<-reading
	for range 10 {
		callers.Go(func() { require.NoError(t, c.Sync(t.Context())) })
	}
	close(release)
	callers.Wait()
	require.Equal(t, 2, n)
}
