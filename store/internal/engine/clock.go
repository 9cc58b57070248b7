package engine

import (
	"context"
	"sync"
	"time"
)

// The store's one clock. Every time the store writes (created_at,
// queued_at, finished_at, a delivery's next attempt) and every time it
// compares with a stored one (a stale task, an expired job, a due
// delivery) is a reading of it, and so are the times its callers pass in
// (store.Store.Now). Servers that share a database must all read the same
// clock, whatever their own clocks say: a server whose clock is ahead
// would otherwise take a task another server published a moment ago for
// lost, or delete a job before its retention ends. So the clock is the
// database's (PostgreSQL's clock_timestamp(); SQLite's database is one
// process, and its clock that process's).
//
// Reading the database's clock costs a round trip, which no write may
// pay. So the clock reads it once (sync), and then adds the time the
// process measured since (its monotonic clock, which no change of its
// wall clock moves) to that reading. It syncs again at least every
// syncEvery, when a transaction begins or a caller asks the time; a
// reading is off the database's clock by at most half the round trip of
// the last sync plus what the process's clock drifted from the database's
// since (a few milliseconds), which is nothing next to the reconciler's
// grace or a retention.

// syncEvery is how long the clock counts on the process's clock between
// two readings of the database's.
const syncEvery = time.Minute

// maxSyncRoundTrip is the slowest reading of the database's clock that
// replaces an earlier one: a slower one says less about when the database
// read it than the one the clock has.
const maxSyncRoundTrip = time.Second

// maxStandStill is the most the clock stands still rather than go back
// when a sync finds the process's clock ran ahead of the database's: so
// that times written one after the other stay in order. A larger step
// back (the database's clock was set back) is followed at once.
const maxStandStill = time.Second

// Clock is the store's clock, safe for concurrent use. Make one with
// newClock.
type Clock struct {
	// read reads the database's clock (Driver.ReadClock).
	read func(ctx context.Context) (time.Time, error)
	// fixed, when set, is the clock itself (Options.Clock): nothing is
	// read from the database.
	fixed func() time.Time
	// local is the process's clock (Options.Local).
	local func() time.Time

	mu sync.Mutex
	// db is the database's clock as last read, and at the process's
	// clock at that moment (half way through the round trip); synced is
	// false until the first reading.
	db, at time.Time
	synced bool
	// syncing is true while one caller reads the database's clock, so
	// that the others do not read it too.
	syncing bool
	// last is the latest time the clock gave since its first sync: it
	// does not go back by up to maxStandStill when a sync finds the
	// process's clock was ahead.
	last time.Time
}

// newClock returns the clock of opts over read.
func newClock(read func(ctx context.Context) (time.Time, error), opts Options) *Clock {
	local := opts.Local
	if local == nil {
		local = time.Now
	}
	return &Clock{read: read, fixed: opts.Clock, local: local}
}

// Now returns the clock's time, at the precision both drivers store
// (microseconds, UTC), so that a time written and read back compares
// equal. It never reads the database: before the first sync, it is the
// process's clock.
func (c *Clock) Now() time.Time {
	if c.fixed != nil {
		return c.fixed().UTC().Truncate(time.Microsecond)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.synced {
		return c.local().UTC().Truncate(time.Microsecond)
	}
	t := c.sinceReading().UTC().Truncate(time.Microsecond)
	if t.Before(c.last) {
		return c.last
	}
	c.last = t
	return t
}

// sinceReading is the database's time by the last reading and the time
// the process measured since, c.mu held.
func (c *Clock) sinceReading() time.Time {
	return c.db.Add(c.local().Sub(c.at))
}

// Sync reads the database's clock if it is time to: never read yet, or
// last read syncEvery ago and no other caller is reading it. An error is
// returned only when the clock has never been read: once it has, a failed
// reading leaves the last one in use, and the next caller tries again.
func (c *Clock) Sync(ctx context.Context) error {
	if c.fixed != nil || !c.claimSync() {
		return nil
	}
	before := c.local()
	db, err := c.read(ctx)
	after := c.local()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.syncing = false
	if err != nil {
		if c.synced {
			return nil
		}
		return err
	}
	trip := after.Sub(before)
	if c.synced && trip > maxSyncRoundTrip {
		return nil
	}
	c.db, c.at, c.synced = db, before.Add(trip/2), true
	if c.last.Sub(c.sinceReading()) > maxStandStill {
		c.last = time.Time{}
	}
	return nil
}

// claimSync reports whether the caller is to read the database's clock
// now, and if so marks it as being read.
func (c *Clock) claimSync() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.synced && (c.syncing || c.local().Sub(c.at) < syncEvery) {
		return false
	}
	c.syncing = true
	return true
}
