package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// ReduceTx holds the primitives that start a job's reduce task
// (StartReduce); it also uses the reopen tree's LockTasks and WriteTasks.
type ReduceTx interface {
	// InsertReduceTask writes task warren.ReduceTaskID of job jobID:
	// pending, generation 1, no attempt, with payload (nil: JSON null).
	InsertReduceTask(ctx context.Context, jobID string, payload []byte) error
	// SetReduceState applies c to its job row if the job is open
	// (pending or running), its reduce_state is c.From and, unless
	// c.Version is AnyVersion, it is still at c.Version: reduce_state
	// set to c.To, the version bumped. It returns true, or false when the
	// guard kept the row as it was (or the job does not exist).
	SetReduceState(ctx context.Context, c ReduceStateChange) (bool, error)
}

// ReduceStateChange is the guarded change of an open job's reduce state.
type ReduceStateChange struct {
	JobID    string
	From, To string
	// Version is the version the job must still be at, or AnyVersion.
	Version int64
}

// errNotStarted rolls StartReduce's transaction back when the job is not
// to reduce, or moved under it.
var errNotStarted = errors.New("the reduce task is not to start")

// StartReduce makes the reduce task of open job jobID pending, in one
// transaction, when startsReduce says the job, as read, is to reduce at
// version: its task row (warren.ReduceTaskID) is inserted, or, left from
// an earlier reduce (the job was redriven since), reset (resetReduceTask);
// then the job's reduce state moves from "" to warren.ReduceRunning at
// version, a guarded transition after the task row, the lock order. It
// returns false, changing nothing, when the job is not to reduce or moved
// under it. An unknown job wraps warren.ErrNotFound.
func (e *Engine) StartReduce(ctx context.Context, jobID string, version int64) (bool, error) {
	err := e.inTx(ctx, func(tx Tx) error {
		job, err := tx.GetJob(ctx, jobID)
		if err != nil {
			return err
		}
		if !startsReduce(job, version) {
			return errNotStarted
		}
		rows, err := tx.LockTasks(ctx, jobID, []int64{warren.ReduceTaskID}, nil)
		if err != nil {
			return fmt.Errorf("lock the reduce task: %w", err)
		}
		if len(rows) == 0 {
			err = tx.InsertReduceTask(ctx, jobID, job.Policy.ReduceTask.Payload)
		} else {
			err = tx.WriteTasks(ctx, jobID, []TaskRow{resetReduceTask(rows[0])})
		}
		if err != nil {
			return fmt.Errorf("write the reduce task: %w", err)
		}
		ok, err := tx.SetReduceState(ctx, ReduceStateChange{JobID: jobID, From: "", To: warren.ReduceRunning, Version: version})
		if err != nil {
			return err
		}
		if !ok {
			return errNotStarted
		}
		return nil
	})
	if errors.Is(err, errNotStarted) {
		return false, nil
	}
	if err != nil {
		return false, e.errorf(err, "start the reduce of job %q", jobID)
	}
	return true, nil
}

// startsReduce reports whether job j, as read, is to start its reduce
// task at version: open, still at version, with a reduce task, none
// started (reduce state ""), ready to close (store.ReadyToClose) and its
// failures within tolerance (a fail-fast job over it closes as failed
// without a reduce).
func startsReduce(j warren.Job, version int64) bool {
	return !j.State.Terminal() && j.Version == version && j.Policy.ReduceTask != nil && j.ReduceState == "" &&
		store.ReadyToClose(j) && j.Policy.Tolerates(j.FailedTasks, j.ExpectedTasks)
}

// resetReduceTask is the reduce task's row left from an earlier reduce,
// ready to run again: pending at its next generation, no attempt, its
// last run (worker, error, result, times) cleared.
func resetReduceTask(row TaskRow) TaskRow {
	row.State, row.Attempts, row.Generation = warren.TaskPending, 0, row.Generation+1
	row.Worker, row.Error, row.Result = "", "", nil
	row.QueuedAt, row.StartedAt, row.FinishedAt = nil, nil, nil
	return row
}
