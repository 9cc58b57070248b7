package engine

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// RetentionTx holds the primitives that delete closed jobs
// (DeleteExpiredJobs, DeleteJob) and then their task rows
// (PurgeDeletedTasks). Its reads lock the rows they return where the
// driver locks rows, skipping those another transaction holds.
type RetentionTx interface {
	RetentionReader
	// DeleteJobs deletes the rows of the jobs of ids that are closed
	// (completed, failed or cancelled; an open one is left as it is),
	// with their reduced results and webhook deliveries, and records each
	// in deleted_jobs, deleted at at, with its number of tasks. Their
	// task rows stay, for PurgeTasks. It returns how many jobs it
	// deleted. The engine runs it only in a transaction of
	// Driver.BeginDelete.
	DeleteJobs(ctx context.Context, ids []string, at time.Time) (int, error)
	// PurgeTasks deletes the task rows of each range of plan, in the
	// order given, through the tasks' primary key, and records it: a
	// range that is not its job's Last as the job's progress (purged
	// through Through), a Last one by forgetting the job. It returns how
	// many task rows it deleted.
	PurgeTasks(ctx context.Context, plan []PurgeRange) (int, error)
}

// RetentionReader reads the candidates of retention, each query through
// an index in the order it returns, so that it reads no more than it
// returns: in a transaction (RetentionTx), or first, outside any
// (Driver.Peek).
type RetentionReader interface {
	// ExpiringJobs reads the candidates of q, each kind in the order it
	// expires: up to q.Limit closed jobs without a retention of their own
	// that closed at or before q.DefaultCutoff (none unless
	// q.ByDefault), and up to q.Limit closed jobs whose own retention
	// ended at or before q.Now.
	ExpiringJobs(ctx context.Context, q ExpiringQuery) ([]ExpiringJob, error)
	// DeletedJobs reads up to limit deleted jobs whose task rows are not
	// all purged, the first deleted first.
	DeletedJobs(ctx context.Context, limit int) ([]DeletedJob, error)
}

// ExpiringQuery says which candidates ExpiringJobs reads.
type ExpiringQuery struct {
	// ByDefault says whether jobs without a retention of their own expire
	// (defaultCutoff), and DefaultCutoff when they must have closed by.
	ByDefault     bool
	DefaultCutoff time.Time
	// Now is the time of the sweep, which a job's own retention must have
	// ended by.
	Now time.Time
	// Limit is the most jobs of each kind read (> 0).
	Limit int
}

// ExpiringJob is a closed job a driver found as a candidate for
// DeleteExpiredJobs (ExpiringJobs), with what pickExpired decides by.
type ExpiringJob struct {
	ID string
	// FinishedAt is when the job closed.
	FinishedAt time.Time
	// Retention is the job's own retention (warren.Policy.Retention), 0
	// for the default.
	Retention time.Duration
}

// DeletedJob is a job that DeleteExpiredJobs or DeleteJob deleted and
// whose task rows PurgeDeletedTasks has not all deleted yet (DeletedJobs).
// A job's task ids are its positions 1..Tasks, so what is left of them is
// the range Purged+1..Tasks.
type DeletedJob struct {
	ID string
	// Tasks is the job's number of tasks (warren.Job.ExpectedTasks).
	Tasks int64
	// Purged is how many of its tasks, from the first, are deleted.
	Purged int64
}

// PurgeRange is the task rows of one deleted job that a purge deletes
// (PurgeTasks): those of task ids After+1..Through, or, when Last, every
// one after After (Through is then the job's last task id) and the job's
// reduce task (warren.ReduceTaskID, which no range counts: a job's task
// count is its map tasks), after which the job has no task left and is
// forgotten. A purge may so delete one row more than its limit.
type PurgeRange struct {
	JobID          string
	After, Through int64
	Last           bool
}

// deleteTries bounds how often DeleteJob reads the job again when it
// changed between its read and its deletion.
const deleteTries = 3

// DeleteExpiredJobs deletes, in one transaction, up to limit closed jobs
// that have expired at at, those that expired first first (limit <= 0
// means store.DefaultPageSize): ExpiringJobs reads the candidates through
// their indexes, pickExpired picks among them, and DeleteJobs
// deletes them, leaving their tasks for PurgeDeletedTasks. A reopened job
// has no finished_at and is open, so it is not a candidate until it
// closes again.
//
// Several servers may call it at once: the candidates are read with their
// rows locked, skipping those another call holds, so each job is deleted
// by one call. Only job rows are locked, never a task row, and the read
// never waits: a transaction that holds a job's tasks and waits for its
// row (a redrive) waits for the commit, then finds the job gone.
func (e *Engine) DeleteExpiredJobs(ctx context.Context, at store.Expiry, limit int) (int, error) {
	limit = PageSize(limit)
	q := ExpiringQuery{Now: asStored(at.Now), Limit: limit}
	if cutoff, ok := defaultCutoff(at); ok {
		q.ByDefault, q.DefaultCutoff = true, asStored(cutoff)
	}
	if p := e.drv.Peek(); p != nil {
		jobs, err := p.ExpiringJobs(ctx, q)
		if err != nil {
			return 0, e.errorf(err, "delete expired jobs")
		}
		if len(pickExpired(at, jobs, limit)) == 0 {
			return 0, nil
		}
	}
	var deleted int
	err := e.inDeleteTx(ctx, func(tx Tx) error {
		deleted = 0
		jobs, err := tx.ExpiringJobs(ctx, q)
		if err != nil {
			return err
		}
		ids := pickExpired(at, jobs, limit)
		if len(ids) == 0 {
			return nil
		}
		deleted, err = tx.DeleteJobs(ctx, ids, e.now())
		return err
	})
	if err != nil {
		return 0, e.errorf(err, "delete expired jobs")
	}
	return deleted, nil
}

// DeleteJob deletes closed job id, whatever its retention, in one
// transaction, as DeleteExpiredJobs deletes an expired one: it reads the
// job, and deletes it if it is closed. It locks the job's row, and no task
// row. An open job wraps store.ErrJobOpen, an unknown one
// warren.ErrNotFound.
func (e *Engine) DeleteJob(ctx context.Context, id string) error {
	err := e.inDeleteTx(ctx, func(tx Tx) error {
		for range deleteTries {
			j, err := tx.GetJob(ctx, id)
			if err != nil {
				return err
			}
			if !j.State.Terminal() {
				return fmt.Errorf("the job is %s: %w", j.State, store.ErrJobOpen)
			}
			n, err := tx.DeleteJobs(ctx, []string{id}, e.now())
			if err != nil || n == 1 {
				return err
			}
			// Reopened, or deleted, since it was read: read it again.
		}
		return fmt.Errorf("%w: the job changed under the deletion %d times", warren.ErrConflict, deleteTries)
	})
	if err != nil {
		return e.errorf(err, "delete job %q", id)
	}
	return nil
}

// PurgeDeletedTasks deletes, in one transaction, up to limit task rows of
// deleted jobs (limit <= 0 means store.DefaultPageSize): DeletedJobs reads
// up to limit of the jobs, the first deleted first, skipping those
// another purge holds; planPurge decides which task id ranges of
// which of them; and PurgeTasks deletes the ranges job by job in id order
// (the lock order of task rows, which an aggregator recording a late
// outcome for one of them follows too), recording each job's progress and
// forgetting the jobs left without a task. It locks no job row. It
// returns how many task rows it deleted.
func (e *Engine) PurgeDeletedTasks(ctx context.Context, limit int) (int, error) {
	limit = PageSize(limit)
	if p := e.drv.Peek(); p != nil {
		jobs, err := p.DeletedJobs(ctx, 1)
		if err != nil {
			return 0, e.errorf(err, "purge tasks of deleted jobs")
		}
		if len(jobs) == 0 {
			return 0, nil
		}
	}
	var purged int
	err := e.inTx(ctx, func(tx Tx) error {
		purged = 0
		jobs, err := tx.DeletedJobs(ctx, limit)
		if err != nil {
			return err
		}
		plan := planPurge(jobs, limit)
		if len(plan) == 0 {
			return nil
		}
		slices.SortFunc(plan, func(a, b PurgeRange) int { return strings.Compare(a.JobID, b.JobID) })
		purged, err = tx.PurgeTasks(ctx, plan)
		return err
	})
	if err != nil {
		return 0, e.errorf(err, "purge tasks of deleted jobs")
	}
	return purged, nil
}

// inDeleteTx is inTx in a transaction that may delete job rows
// (Driver.BeginDelete).
func (e *Engine) inDeleteTx(ctx context.Context, fn func(tx Tx) error) error {
	return e.inTxBegun(ctx, e.drv.BeginDelete, fn)
}

// defaultCutoff returns the time before which (or at which) a job without
// a retention of its own must have closed to be expired at e.Now, and
// false when such jobs never expire (e.Retention <= 0). ExpiringJobs
// selects those candidates by it.
func defaultCutoff(e store.Expiry) (time.Time, bool) {
	if e.Retention <= 0 {
		return time.Time{}, false
	}
	return e.Now.Add(-e.Retention), true
}

// pickExpired returns the ids of up to limit of jobs that have expired at
// e.Now (store.ExpiresAt, e.Retention the default; limit <= 0 meaning
// store.DefaultPageSize), those that expired first first, and of two that
// expired at once the one with the smaller id first. Jobs that have not
// expired are left out, so a driver may offer more candidates than
// expired.
func pickExpired(e store.Expiry, jobs []ExpiringJob, limit int) []string {
	type expired struct {
		id string
		at time.Time
	}
	var picked []expired
	for _, j := range jobs {
		closed := warren.Job{State: warren.JobCompleted, FinishedAt: &j.FinishedAt, Policy: warren.Policy{Retention: j.Retention}}
		at, ok := store.ExpiresAt(closed, e.Retention)
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

// planPurge decides what one PurgeDeletedTasks deletes of jobs, taken in
// their order: up to limit task rows (limit <= 0 meaning
// store.DefaultPageSize), each job's from its first left, a job finished
// before the next is started. A job with no task left gets a Last range
// that deletes nothing, whatever the limit, so that it is forgotten.
// PurgeTasks deletes by task id range, through the tasks' primary key,
// never reading more than it deletes.
func planPurge(jobs []DeletedJob, limit int) []PurgeRange {
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
