package store

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/warrenhq/warren"
)

// Retention: a closed job is kept for its retention after it closed,
// then deleted with its tasks, results and idempotency key. The rules
// below decide which jobs have expired; the drivers' SQL only selects
// candidates through their indexes and deletes what PickExpired picks.

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
func ExpiresAt(j warren.Job, def time.Duration) (time.Time, bool) {
	if !j.State.Terminal() || j.FinishedAt == nil {
		return time.Time{}, false
	}
	return expiresAt(*j.FinishedAt, j.Policy.Retention, def)
}

// expiresAt is ExpiresAt for a job that closed at finished with its own
// retention own (0 for none).
func expiresAt(finished time.Time, own, def time.Duration) (time.Time, bool) {
	switch {
	case own > 0:
		return finished.Add(own), true
	case def > 0:
		return finished.Add(def), true
	}
	return time.Time{}, false
}

// DefaultCutoff returns the time before which (or at which) a job without
// a retention of its own must have closed to be expired at e.Now, and
// false when such jobs never expire (e.Retention <= 0). Drivers select
// those candidates by it.
func (e Expiry) DefaultCutoff() (time.Time, bool) {
	if e.Retention <= 0 {
		return time.Time{}, false
	}
	return e.Now.Add(-e.Retention), true
}

// ExpiringJob is a closed job a driver found as a candidate for
// DeleteExpiredJobs, with what PickExpired decides by.
type ExpiringJob struct {
	ID string
	// FinishedAt is when the job closed.
	FinishedAt time.Time
	// Retention is the job's own retention (warren.Policy.Retention), 0
	// for the default.
	Retention time.Duration
}

// PickExpired returns the ids of up to limit of jobs that have expired at
// e.Now (limit <= 0 meaning DefaultPageSize), those that expired first
// first, and of two that expired at once the one with the smaller id
// first. Jobs that have not expired are left out, so a driver may offer
// more candidates than expired.
func (e Expiry) PickExpired(jobs []ExpiringJob, limit int) []string {
	type expired struct {
		id string
		at time.Time
	}
	var picked []expired
	for _, j := range jobs {
		at, ok := expiresAt(j.FinishedAt, j.Retention, e.Retention)
		if ok && !at.After(e.Now) {
			picked = append(picked, expired{id: j.ID, at: at})
		}
	}
	slices.SortFunc(picked, func(a, b expired) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	picked = picked[:min(len(picked), PageSize(limit))]
	ids := make([]string, len(picked))
	for i, p := range picked {
		ids[i] = p.id
	}
	return ids
}

// DeletedJob is a job that DeleteExpiredJobs or DeleteJob deleted and
// whose task rows PurgeDeletedTasks has not all deleted yet. A job's task
// ids are its positions 1..Tasks, so what is left of them is the range
// Purged+1..Tasks.
type DeletedJob struct {
	ID string
	// Tasks is the job's number of tasks (warren.Job.ExpectedTasks).
	Tasks int64
	// Purged is how many of its tasks, from the first, are deleted.
	Purged int64
}

// PurgeRange is the task rows of one deleted job that a purge deletes:
// those of task ids After+1..Through, or, when Last, every one after
// After (Through is then the job's last task id), after which the job has
// no task left and is forgotten.
type PurgeRange struct {
	JobID          string
	After, Through int64
	Last           bool
}

// PlanPurge decides what one PurgeDeletedTasks deletes of jobs, taken in
// their order: up to limit task rows (limit <= 0 meaning
// DefaultPageSize), each job's from its first left, a job finished before
// the next is started. A job with no task left gets a Last range that
// deletes nothing, whatever the limit, so that it is forgotten. Driver
// deletes by task id range, through the tasks' primary key, never reading
// more than it deletes.
func PlanPurge(jobs []DeletedJob, limit int) []PurgeRange {
	budget := int64(PageSize(limit))
	var plan []PurgeRange
	for _, j := range jobs {
		left := max(j.Tasks-j.Purged, 0)
		if left > 0 && budget == 0 {
			break
		}
		n := min(left, budget)
		budget -= n
		plan = append(plan, PurgeRange{JobID: j.ID, After: j.Purged, Through: j.Purged + n, Last: n == left})
	}
	return plan
}
