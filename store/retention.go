package store

import (
	"fmt"
	"time"

	"github.com/warrenhq/warren"
)

// Retention: a closed job is kept for its retention after it closed,
// then deleted with its tasks, results and idempotency key. ExpiresAt is
// the rule of when; the store's engine applies it to the candidates its
// drivers' SQL selects through their indexes, and deletes what expired.

// ErrJobOpen is DeleteJob's error for a job that is still open (pending
// or running): cancel it first. It wraps warren.ErrConflict.
var ErrJobOpen = fmt.Errorf("%w: the job is open; cancel it before deleting it", warren.ErrConflict)

// Expiry says which closed jobs DeleteExpiredJobs deletes: those whose
// ExpiresAt, with Retention as the default, is not after Now.
type Expiry struct {
	// Now is the time of the sweep, read from Store.Now: the clock that
	// wrote the jobs' finished_at.
	Now time.Time
	// Retention is the retention of the jobs that give none of their own
	// (warren.Policy.Retention 0): the server's. Zero or negative keeps
	// those jobs forever. A job's own retention applies whatever
	// Retention is.
	Retention time.Duration
}

// ExpiresAt returns when job j expires with def as the retention of jobs
// that give none: its finished_at plus its own retention, or plus def
// when it has none. It returns false when j never expires as it stands:
// an open job (a reopened one too: its clock starts again when it closes
// again), or a job without a retention of its own when def <= 0.
// DeleteExpiredJobs deletes a job once this time is not after its
// Expiry's Now.
func ExpiresAt(j warren.Job, def time.Duration) (time.Time, bool) {
	if !j.State.Terminal() || j.FinishedAt == nil {
		return time.Time{}, false
	}
	switch own := j.Policy.Retention; {
	case own > 0:
		return j.FinishedAt.Add(own), true
	case def > 0:
		return j.FinishedAt.Add(def), true
	}
	return time.Time{}, false
}
