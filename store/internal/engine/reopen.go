package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// ReopenTx holds the primitives that reopen failed work (RedriveJob,
// ReopenTasks, ReopenTask) and put a replay's reopen back (UndoReopen).
type ReopenTx interface {
	// LockTasks locks the rows of job jobID's tasks named by ids and of
	// its tasks in states, in task id order, before any job row (the lock
	// order of the package doc of store/postgres), and returns the rows
	// of those named by ids that exist, in task id order.
	LockTasks(ctx context.Context, jobID string, ids []int64, states []warren.TaskState) ([]TaskRow, error)
	// WriteTasks writes rows, which LockTasks locked, to the tasks of job
	// jobID as they are: state, attempts, worker, error, result, the
	// three times and the generation.
	WriteTasks(ctx context.Context, jobID string, rows []TaskRow) error
	// RequeueTasks moves job jobID's map tasks (task ids above
	// warren.ReduceTaskID: never its reduce task) in states back to
	// pending at their next generation, with their attempts, worker and
	// queued_at kept and their error, result, started_at and finished_at
	// cleared, locking them in task id order first. It returns how many
	// it moved from each state.
	RequeueTasks(ctx context.Context, jobID string, states []warren.TaskState) (map[warren.TaskState]int64, error)
	// ReopenJob applies r to its job row if the job is closed as failed
	// or completed and, unless r.Version is AnyVersion, still at
	// r.Version: running again, without finished_at, error or result
	// location, the failed counter dropped by r.Failed, the reduce state
	// set to r.ReduceState, the version bumped. It deletes the job's stored result in the same step and
	// returns it when r.TakeResult. It returns the row as written and
	// true, or false when the guard kept it as it was (or the job does
	// not exist), deleting nothing.
	ReopenJob(ctx context.Context, r JobReopen) (warren.Job, []byte, bool, error)
	// AdjustCounters adds a.Failed to the failed counter of job a.JobID
	// and bumps its version, if the job is open (pending or running) and,
	// unless a.Version is AnyVersion, still at a.Version. It returns the
	// new version and true, or false when the guard kept the row as it
	// was (or the job does not exist).
	AdjustCounters(ctx context.Context, a CounterAdjust) (int64, bool, error)
}

// TaskRow is a task row as the reopen primitives read and write it, its
// generation among its fields.
type TaskRow struct {
	warren.TaskRecord
}

// JobReopen is the guarded transition of a closed job back to running.
type JobReopen struct {
	ID string
	// Version is the version the job must still be at, or AnyVersion.
	Version int64
	// Failed is how much the failed counter drops.
	Failed int64
	// TakeResult asks for the deleted result to be returned.
	TakeResult bool
	// ReduceState is the job's reduce state once reopened
	// (warren.Job.ReduceState).
	ReduceState string
}

// CounterAdjust is the guarded change of an open job's counters.
type CounterAdjust struct {
	JobID string
	// Failed is added to the failed counter (negative to drop it).
	Failed int64
	// Version is the version the job must still be at, or AnyVersion.
	Version int64
}

// reopenTries bounds how often ReopenTasks starts over when the job
// closed, or was reopened, between its first read and its write.
const reopenTries = 5

// errAgain asks ReopenTasks to start over; errMoved tells UndoReopen that
// the job moved since the reopen. Both roll the transaction back.
var (
	errAgain = errors.New("the job moved under the reopen")
	errMoved = errors.New("the job moved since the reopen")
)

// RedriveJob reopens job id, closed as failed or completed, in one
// transaction: its failed map tasks, and the map tasks that closing it
// cancelled (a fail-fast job's tasks that never finished), go back to
// pending at their next generation with their attempts kept (a redrive
// keeps counting) and the rest of their last run cleared; the failed
// counter drops by the failed ones; the job is running again, without
// finished_at, error, result location or stored result, and its reduce
// state is reset to "" (its reduce task's row stays as it is until
// StartReduce resets it), so that its reduce task runs again on the new
// outcomes. A job whose only fault is its reduce task (reduce state
// warren.ReduceFailed, no failed map task) is redriven too. It returns the
// reopened job and how many tasks went back to pending, both kinds
// together, so that completed + failed + pending tasks is expected again.
// The job row moves by a guarded transition after the task rows are
// locked: of concurrent redrives of one job exactly one succeeds. An open
// or cancelled job, or one without a failed task or reduce task, wraps
// warren.ErrConflict; an unknown one, warren.ErrNotFound.
func (e *Engine) RedriveJob(ctx context.Context, id string) (warren.Job, int, error) {
	var (
		job      warren.Job
		requeued int64
	)
	err := e.inTx(ctx, func(tx Tx) error {
		j, err := tx.GetJob(ctx, id)
		if err != nil {
			return err
		}
		if !reopenable(j.State) {
			return fmt.Errorf("%w: the job is %s", warren.ErrConflict, j.State)
		}
		moved, err := tx.RequeueTasks(ctx, id, []warren.TaskState{warren.TaskFailed, warren.TaskCancelled})
		if err != nil {
			return fmt.Errorf("requeue tasks: %w", err)
		}
		failed := moved[warren.TaskFailed]
		if failed == 0 && j.ReduceState != warren.ReduceFailed {
			return fmt.Errorf("%w: the job has no failed task", warren.ErrConflict)
		}
		// The reduce runs again on the new outcomes (StartReduce resets
		// its task row then).
		j, _, ok, err := tx.ReopenJob(ctx, JobReopen{ID: id, Version: AnyVersion, Failed: failed})
		if err != nil {
			return err
		}
		if !ok {
			if _, err := tx.GetJob(ctx, id); err != nil { // deleted meanwhile
				return err
			}
			return fmt.Errorf("%w: the job was reopened meanwhile", warren.ErrConflict)
		}
		job, requeued = j, failed+moved[warren.TaskCancelled]
		return nil
	})
	if err != nil {
		return warren.Job{}, 0, e.errorf(err, "redrive job %q", id)
	}
	return job, int(requeued), nil
}

// ReopenTask is ReopenTasks for one task: it returns the task's new
// generation and true; or false, changing nothing, when the task is not
// failed or its job is cancelled. An unknown job or task wraps
// warren.ErrNotFound.
func (e *Engine) ReopenTask(ctx context.Context, jobID string, taskID int64) (int, bool, error) {
	r, err := e.ReopenTasks(ctx, jobID, []int64{taskID})
	if err != nil {
		return 0, false, err
	}
	if len(r.Unknown) > 0 {
		return 0, false, e.errorf(fmt.Errorf("task %d: %w", taskID, warren.ErrNotFound), "reopen task %d of job %q", taskID, jobID)
	}
	if len(r.Tasks) == 0 {
		return 0, false, nil
	}
	return r.Tasks[0].Generation, true, nil
}

// ReopenTasks makes the failed tasks among taskIDs of job jobID queued
// again for a dead-letter replay, in one transaction: each at its next
// generation, queued_at now, its attempts reset to 0 (the replayed
// message's x-retry) and the rest of its last run cleared, its worker
// kept; the failed counter drops by as many. A closed job (failed or
// completed) reopens as running, as RedriveJob leaves it, and its tasks
// that closing it cancelled go back to pending at their next generation:
// they never ran, and the job must be able to close again with every task
// accounted for. The Reopening keeps what the reopen changed, for
// UndoReopen. A task that is not failed, and every task of a cancelled
// job, is left as it is; an unknown job wraps warren.ErrNotFound.
//
// Which task rows are locked depends on the job's state as first read (a
// closed job's cancelled tasks too), and the job row is written after
// them by a guarded transition; when the job closed or was reopened in
// between, nothing changes and the reopen starts over, up to reopenTries
// times.
func (e *Engine) ReopenTasks(ctx context.Context, jobID string, taskIDs []int64) (store.Reopening, error) {
	ids := slices.Clone(taskIDs)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	for range reopenTries {
		r, err := e.reopenTasks(ctx, jobID, ids)
		if errors.Is(err, errAgain) {
			continue
		}
		if err != nil {
			return store.Reopening{}, e.errorf(err, "reopen tasks %v of job %q", ids, jobID)
		}
		return r, nil
	}
	return store.Reopening{}, e.errorf(errAgain, "reopen tasks %v of job %q: %d tries", ids, jobID, reopenTries)
}

// reopenTasks is one try of ReopenTasks, for ids in order without
// duplicates. It returns errAgain when the job moved under it.
func (e *Engine) reopenTasks(ctx context.Context, jobID string, ids []int64) (store.Reopening, error) {
	var r store.Reopening
	err := e.inTx(ctx, func(tx Tx) error {
		r = store.Reopening{JobID: jobID}
		job, err := tx.GetJob(ctx, jobID)
		if err != nil {
			return err
		}
		if job.State == warren.JobCancelled {
			return nil
		}
		closed := reopenable(job.State)
		var cancelled []warren.TaskState
		if closed {
			cancelled = []warren.TaskState{warren.TaskCancelled}
		}
		rows, err := tx.LockTasks(ctx, jobID, ids, cancelled)
		if err != nil {
			return fmt.Errorf("lock tasks: %w", err)
		}
		r.Unknown = unknownIDs(ids, rows)
		now := e.now()
		var reopen []TaskRow
		for _, row := range reopenableTasks(job, rows) {
			r.Tasks = append(r.Tasks, store.ReopenedTask{TaskID: row.TaskID, Generation: row.Generation + 1, Was: row.TaskRecord})
			row.State, row.Attempts, row.Generation = warren.TaskQueued, 0, row.Generation+1
			row.Error, row.Result, row.StartedAt, row.FinishedAt, row.QueuedAt = "", nil, nil, nil, &now
			reopen = append(reopen, row)
		}
		if len(reopen) == 0 {
			return nil
		}
		if err := tx.WriteTasks(ctx, jobID, reopen); err != nil {
			return fmt.Errorf("write tasks: %w", err)
		}
		n := mapTasks(reopen)
		// A reopened map task makes the reduce run again once the map
		// tasks are done; a reopened reduce task is the reduce running.
		reduceState := ""
		if n == 0 {
			reduceState = warren.ReduceRunning
		}
		if !closed {
			v, ok, err := tx.AdjustCounters(ctx, CounterAdjust{JobID: jobID, Failed: -n, Version: AnyVersion})
			if err != nil {
				return err
			}
			if !ok { // closed, cancelled or deleted since it was read
				return errAgain
			}
			r.Version = v
			return nil
		}
		if _, err := tx.RequeueTasks(ctx, jobID, cancelled); err != nil {
			return fmt.Errorf("requeue tasks: %w", err)
		}
		reopened, result, ok, err := tx.ReopenJob(ctx, JobReopen{ID: jobID, Version: job.Version, Failed: n,
			TakeResult: job.ResultLocation != "", ReduceState: reduceState})
		if err != nil {
			return err
		}
		if !ok { // reopened, and maybe closed again, or deleted since it was read
			return errAgain
		}
		r.Version, r.Closed, r.Result = reopened.Version, &job, result
		return nil
	})
	if err != nil {
		return store.Reopening{}, err
	}
	return r, nil
}

// reopenableTasks returns the rows, of job's tasks locked for a replay,
// that the replay reopens: the failed ones, but for the reduce task
// (warren.ReduceTaskID) and the job's reduce state. While the job's
// reduce task runs or its outcome waits for the close (an open job whose
// reduce state is not ""), nothing is reopened: the reduce reads the map
// tasks' outcomes as they are. The reduce task is reopened only when it
// failed the job (closed as failed, reduce state warren.ReduceFailed),
// and not beside a map task: a reopened map task makes the reduce start
// over anyway once the map tasks are done.
func reopenableTasks(job warren.Job, rows []TaskRow) []TaskRow {
	if !job.State.Terminal() && job.ReduceState != "" {
		return nil
	}
	var failedMap, failedReduce []TaskRow
	for _, row := range rows {
		switch {
		case row.State != warren.TaskFailed:
		case row.TaskID != warren.ReduceTaskID:
			failedMap = append(failedMap, row)
		case job.State == warren.JobFailed && job.ReduceState == warren.ReduceFailed:
			failedReduce = append(failedReduce, row)
		}
	}
	if len(failedMap) > 0 {
		return failedMap
	}
	return failedReduce
}

// mapTasks counts the map tasks of rows (those that are not the reduce
// task): the tasks a job's counters count.
func mapTasks(rows []TaskRow) int64 {
	var n int64
	for _, row := range rows {
		if row.TaskID != warren.ReduceTaskID {
			n++
		}
	}
	return n
}

// unknownIDs lists the ids, in order, that rows, in the same order, lack.
func unknownIDs(ids []int64, rows []TaskRow) []int64 {
	var unknown []int64
	i := 0
	for _, id := range ids {
		for i < len(rows) && rows[i].TaskID < id {
			i++
		}
		if i == len(rows) || rows[i].TaskID != id {
			unknown = append(unknown, id)
		}
	}
	return unknown
}

// UndoReopen puts back what r changed, for a replay the broker surely did
// not take, in one transaction, if the job is still at r.Version and its
// reopened tasks at the generations r gave them, unfinished: the tasks
// failed again as r.Was records them (at their new generation: a
// generation is never given twice, so an outcome of the refused message
// can never count for a later run), the failed counter raised by as many;
// and, when r reopened a closed job, the job's unfinished tasks (those the
// reopen requeued: a closed job has no other) cancelled again as its close
// cancelled them, at its finish time, and the job closed again as it was,
// with its stored result, without a webhook delivery (its close already
// made one). It returns false, changing nothing, when the job or a task
// moved since.
func (e *Engine) UndoReopen(ctx context.Context, r store.Reopening) (bool, error) {
	if len(r.Tasks) == 0 {
		return true, nil
	}
	ids := make([]int64, len(r.Tasks))
	for i, t := range r.Tasks {
		ids[i] = t.TaskID
	}
	err := e.inTx(ctx, func(tx Tx) error {
		var unfinished []warren.TaskState
		if r.Closed != nil {
			unfinished = []warren.TaskState{warren.TaskPending, warren.TaskQueued}
		}
		rows, err := tx.LockTasks(ctx, r.JobID, ids, unfinished)
		if err != nil {
			return fmt.Errorf("lock tasks: %w", err)
		}
		restore, err := restoredTasks(r, rows)
		if err != nil {
			return err
		}
		if err := tx.WriteTasks(ctx, r.JobID, restore); err != nil {
			return fmt.Errorf("write tasks: %w", err)
		}
		closed := r.Closed
		finishedAt := e.now()
		if closed != nil && closed.FinishedAt != nil {
			finishedAt = *closed.FinishedAt
		}
		if closed != nil {
			if err := tx.CancelTasks(ctx, r.JobID, finishedAt); err != nil {
				return err
			}
		}
		v, ok, err := tx.AdjustCounters(ctx, CounterAdjust{JobID: r.JobID, Failed: mapTasks(restore), Version: r.Version})
		if err != nil {
			return err
		}
		if !ok {
			return errMoved
		}
		if closed == nil {
			return nil
		}
		_, ok, err = tx.CloseJob(ctx, JobClose{ID: r.JobID, State: closed.State, FinishedAt: finishedAt, Error: closed.Error,
			ResultLocation: closed.ResultLocation, Version: v, ReduceState: &closed.ReduceState})
		if err != nil {
			return err
		}
		if !ok { // the row is this transaction's since AdjustCounters
			return errors.New("the job did not close again")
		}
		if r.Result != nil {
			return tx.PutResult(ctx, r.JobID, r.Result)
		}
		return nil
	})
	if errors.Is(err, errMoved) {
		return false, nil
	}
	if err != nil {
		return false, e.errorf(err, "undo the reopen of job %q", r.JobID)
	}
	return true, nil
}

// restoredTasks returns the rows that put r's tasks back as they were, at
// their new generations, or errMoved when a locked row (rows, in task id
// order) is missing, at another generation or finished.
func restoredTasks(r store.Reopening, rows []TaskRow) ([]TaskRow, error) {
	restore := make([]TaskRow, 0, len(r.Tasks))
	for _, t := range r.Tasks {
		i := slices.IndexFunc(rows, func(row TaskRow) bool { return row.TaskID == t.TaskID })
		if i < 0 || rows[i].Generation != t.Generation ||
			(rows[i].State != warren.TaskQueued && rows[i].State != warren.TaskPending) {
			return nil, errMoved
		}
		was := t.Was
		was.JobID, was.TaskID, was.Generation = r.JobID, t.TaskID, t.Generation
		restore = append(restore, TaskRow{TaskRecord: was})
	}
	return restore, nil
}

// reopenable reports whether a job closed in state can be reopened by
// RedriveJob or ReopenTasks: failed, or completed (with tolerated
// failures). A cancelled job stays cancelled, and an open job has nothing
// to reopen.
func reopenable(state warren.JobState) bool {
	return state == warren.JobFailed || state == warren.JobCompleted
}
