package engine

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// StaleTx holds the primitives that find and settle lost tasks
// (ReconcileStale) and expire jobs (RetentionTx).
type StaleTx interface {
	// ClaimStale reads up to q.Limit queued tasks of open jobs that are
	// stale by q, oldest queued_at first (of two queued at once, either),
	// and locks them where the driver locks rows, skipping the rows
	// another transaction holds. A task is stale when max(queued_at,
	// q.Busy) is more than its job's task timeout (its own, or
	// q.DefaultTimeout when it has none) before q.Cutoff. The selection
	// stays one statement for speed: walking the queued tasks in
	// queued_at order through an index, it stops at the first one
	// published too recently for the shortest timeout of any open job.
	// storetest pins it (ReconcileStale).
	ClaimStale(ctx context.Context, q StaleQuery) ([]StaleTask, error)
	// SettleLost applies the transitions of l to those of its tasks that
	// are still queued: l.Requeue back to pending at their next
	// generation, l.Fail to failed with l.Error, finished at l.At; both
	// with attempts+1. It returns how many it requeued and the tasks it
	// failed.
	SettleLost(ctx context.Context, l LostTasks) (requeued int, failed []store.TaskRef, err error)

	RetentionTx
}

// StaleQuery says which queued tasks ClaimStale reads.
type StaleQuery struct {
	// Cutoff is the pass's time less its grace (staleCutoff).
	Cutoff time.Time
	// Busy is store.Staleness.Busy: the latest time a task message may
	// have waited in a queue (the zero time for never).
	Busy time.Time
	// DefaultTimeout is the task timeout of a job that gives none.
	DefaultTimeout time.Duration
	// Limit is the most tasks read (> 0).
	Limit int
}

// LostTasks are the transitions of the tasks ReconcileStale found lost.
type LostTasks struct {
	Requeue, Fail []store.TaskRef
	// Error is the failed tasks' error.
	Error string
	// At is when the failed tasks finished.
	At time.Time
}

// ReconcileStale handles, in one transaction, up to limit queued tasks of
// open jobs that are stale at at (store.Staleness), oldest publish first;
// limit <= 0 means store.DefaultPageSize. ClaimStale finds them,
// splitLost decides which go back to pending and which fail as lost
// (store.LostError, finished at at.Now), SettleLost applies both, and the
// failed ones move their jobs' failed counters, job rows in id order
// after the task rows. ReadyToClose lists, once each and in id order, the
// jobs this made ready to close (becameReady).
//
// Several servers may call it at once: a driver that runs transactions in
// parallel claims the tasks with their rows locked until the commit,
// skipping those another call holds, so each is handled by one call.
// Such a claim never waits for a task lock, so the order it takes them
// in cannot close a cycle with the lock order.
func (e *Engine) ReconcileStale(ctx context.Context, at store.Staleness, limit int) (store.ReconcileReport, error) {
	var report store.ReconcileReport
	err := e.inTx(ctx, func(tx Tx) error {
		report = store.ReconcileReport{}
		stale, err := tx.ClaimStale(ctx, StaleQuery{Cutoff: asStored(staleCutoff(at)), Busy: asStored(at.Busy),
			DefaultTimeout: warren.DefaultTaskTimeout, Limit: PageSize(limit)})
		if err != nil {
			return err
		}
		requeue, fail := splitLost(stale)
		if len(requeue)+len(fail) == 0 {
			return nil
		}
		requeued, failedTasks, err := tx.SettleLost(ctx, LostTasks{Requeue: requeue, Fail: fail,
			Error: store.LostError, At: asStored(at.Now)})
		if err != nil {
			return err
		}
		report.Requeued, report.Failed = requeued, len(failedTasks)
		report.ReadyToClose, err = addFailed(ctx, tx, failedTasks)
		if err != nil {
			return err
		}
		// The lost runs are attempts too. The claim holds the rows, so
		// every requeue it asked for applied; were it otherwise, which
		// were requeued would be unknown, and none is recorded.
		if requeued != len(requeue) {
			requeue = nil
		}
		if lost := lostAttempts(stale, requeue, failedTasks, asStored(at.Now)); len(lost) > 0 {
			if _, _, err := tx.WriteOutcomes(ctx, nil, nil, lost); err != nil {
				return fmt.Errorf("record lost runs: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return store.ReconcileReport{}, e.errorf(err, "reconcile stale tasks")
	}
	return report, nil
}

// addFailed adds the failed map tasks of failedTasks to their jobs'
// failed counters, and a failed reduce task (warren.ReduceTaskID) to its
// job's reduce state (warren.ReduceFailed, no counter moved), in job id
// order, and returns the jobs that made ready to close, in that order.
func addFailed(ctx context.Context, tx Tx, failedTasks []store.TaskRef) ([]string, error) {
	failed := make(map[string]*CounterDelta)
	for _, ref := range failedTasks {
		d := failed[ref.JobID]
		if d == nil {
			d = &CounterDelta{JobID: ref.JobID}
			failed[ref.JobID] = d
		}
		if ref.TaskID == warren.ReduceTaskID {
			d.ReduceState = warren.ReduceFailed
		} else {
			d.Failed++
		}
	}
	adds := make([]CounterDelta, 0, len(failed))
	for _, id := range slices.Sorted(maps.Keys(failed)) {
		adds = append(adds, *failed[id])
	}
	if len(adds) == 0 {
		return nil, nil
	}
	jobs, err := tx.BumpCounters(ctx, adds)
	if err != nil {
		return nil, err
	}
	var ready []string
	for i, j := range jobs {
		if becameReady(j, adds[i]) {
			ready = append(ready, j.ID)
		}
	}
	return ready, nil
}

// lostAttempts are the attempt rows of the lost runs of stale: retried
// for the tasks of requeued, failed for those of failed, each its task's
// next attempt at the generation it was lost at, with store.LostError,
// finished at now, worker unknown. They prune nothing: the bound is
// the server's (store.Outcome.KeepAttempts), which the next outcome of
// the task applies.
func lostAttempts(stale []StaleTask, requeued, failed []store.TaskRef, now time.Time) []AttemptWrite {
	outcomes := make(map[store.TaskRef]warren.AttemptOutcome, len(requeued)+len(failed))
	for _, r := range requeued {
		outcomes[r] = warren.AttemptRetried
	}
	for _, r := range failed {
		outcomes[r] = warren.AttemptFailed
	}
	var out []AttemptWrite
	for _, t := range stale {
		outcome, ok := outcomes[t.TaskRef]
		if !ok {
			continue
		}
		a := bounded(AttemptWrite{TaskRef: t.TaskRef, Attempt: t.Attempts + 1, Generation: t.Generation,
			Outcome: outcome, FinishedAt: now, Error: store.LostError}, 0)
		a.PruneThrough = 0
		out = append(out, a)
	}
	return distinctAttempts(out)
}

// StaleTask is a queued task that ReconcileStale found past its job's task
// timeout (ClaimStale), with what splitLost decides by.
type StaleTask struct {
	store.TaskRef
	// Attempts is the task's recorded runs, not counting the lost one.
	Attempts int
	// Generation is the task's generation, the lost run's.
	Generation int
	// MaxRetries is the job's retry budget (warren.Policy.MaxRetries).
	MaxRetries int
}

// staleCutoff is the time that, less a job's task timeout, both a task's
// queued_at and s.Busy must be before for the task to be stale
// (store.Staleness): s.Now less s.Grace. ClaimStale compares with it in
// SQL.
func staleCutoff(s store.Staleness) time.Time {
	return s.Now.Add(-s.Grace)
}

// splitLost decides what becomes of stale tasks whose run was lost. The
// lost run counts as an attempt: a task whose Attempts+1 is at most its
// MaxRetries goes back to pending (requeue), any other fails as lost with
// store.LostError (fail). Both keep the order of tasks.
func splitLost(tasks []StaleTask) (requeue, fail []store.TaskRef) {
	for _, t := range tasks {
		if t.Attempts+1 <= t.MaxRetries {
			requeue = append(requeue, t.TaskRef)
		} else {
			fail = append(fail, t.TaskRef)
		}
	}
	return requeue, fail
}

// asStored is t as both drivers store it: UTC, to the microsecond.
func asStored(t time.Time) time.Time {
	return t.UTC().Truncate(time.Microsecond)
}
