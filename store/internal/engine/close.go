package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// CloseTx holds the primitives that close a job (CancelJob, FinishJob).
type CloseTx interface {
	// GetJob reads one job row. An unknown job wraps warren.ErrNotFound.
	GetJob(ctx context.Context, id string) (warren.Job, error)
	// CancelTasks moves the pending and queued tasks of job jobID to
	// cancelled, finished at at. A driver that locks rows locks them in
	// task id order, before any job row (the lock order of the package
	// doc of store/postgres).
	CancelTasks(ctx context.Context, jobID string, at time.Time) error
	// CloseJob applies c to its job row if the job is open (pending or
	// running) and, unless c.Version is AnyVersion, still at c.Version:
	// state, finished_at, error and result_location set (and
	// reduce_state, when c.ReduceState is not nil), the version bumped,
	// and its pause cleared (paused_at: a closed job is not paused, and a
	// redrive or a replay reopens it unpaused). It returns the row as written and true, or false when the
	// guard kept it as it was (or the job does not exist).
	CloseJob(ctx context.Context, c JobClose) (warren.Job, bool, error)
	// PutResult stores a job's reduced result, replacing any earlier one.
	PutResult(ctx context.Context, jobID string, data []byte) error
	// InsertDelivery writes a pending webhook delivery, due at d.At.
	InsertDelivery(ctx context.Context, d NewDelivery) error
	// ScanResults calls fn for each map task of job jobID (never the
	// reduce task) in task id order, with its state and result, as this
	// transaction sees them; an error from fn stops it and is returned
	// as it is.
	ScanResults(ctx context.Context, jobID string, fn func(taskID int64, state warren.TaskState, result json.RawMessage) error) error
}

// AnyVersion is a JobClose.Version that matches every version.
const AnyVersion int64 = -1

// JobClose is the guarded transition of one job row to a closed state.
type JobClose struct {
	ID         string
	State      warren.JobState
	FinishedAt time.Time
	Error      string
	// ResultLocation is the job's new result location ("" for none).
	ResultLocation string
	// Version is the version the job must still be at, or AnyVersion.
	Version int64
	// ReduceState, when not nil, is the job's new reduce state
	// (warren.Job.ReduceState); nil keeps it.
	ReduceState *string
}

// NewDelivery is a webhook delivery to write, pending and due at At.
type NewDelivery struct {
	ID, JobID, Event string
	Body             []byte
	At               time.Time
}

// CancelJob moves an open job to cancelled, with the error
// store.CancelledError, and its unfinished tasks to cancelled, in one
// transaction, which also makes the job's webhook delivery. A closed job
// wraps warren.ErrConflict, an unknown one warren.ErrNotFound.
func (e *Engine) CancelJob(ctx context.Context, id string) (warren.Job, error) {
	var job warren.Job
	err := e.inTx(ctx, func(tx Tx) error {
		at := e.now()
		if err := tx.CancelTasks(ctx, id, at); err != nil {
			return err
		}
		j, ok, err := tx.CloseJob(ctx, JobClose{ID: id, State: warren.JobCancelled, FinishedAt: at,
			Error: store.CancelledError, Version: AnyVersion})
		if err != nil {
			return err
		}
		if !ok {
			j, err := tx.GetJob(ctx, id)
			if err != nil {
				return err
			}
			return fmt.Errorf("%w: the job is %s", warren.ErrConflict, j.State)
		}
		job = j
		return deliverClosed(ctx, tx, j)
	})
	if err != nil {
		return warren.Job{}, e.errorf(err, "cancel job %q", id)
	}
	return job, nil
}

// FinishJob closes an open job, still at version, as completed or
// failed, in one transaction: its unfinished tasks cancelled (first, as
// the lock order wants), the guarded transition of the job row (finished
// now, with errMsg as storedText makes it, the version bumped),
// result, when not nil, stored with its location recorded
// (store.ResultLocation), and the job's webhook delivery made. It returns
// false, changing nothing, when the job is already closed or no longer at
// version: the transaction is rolled back, so a task a reopen made queued
// again stays queued. An unknown job wraps warren.ErrNotFound; any other
// state than completed or failed is an error (validateFinishState)
// that changes nothing. A job closed as completed with a follow-up and
// no next job yet starts it in the same transaction (startFollowUp).
func (e *Engine) FinishJob(ctx context.Context, jobID string, version int64, state warren.JobState, result []byte, errMsg string) (bool, error) {
	if err := validateFinishState(state); err != nil {
		return false, e.errorf(err, "finish job %q", jobID)
	}
	errMsg = storedText(errMsg)
	errMoved := errors.New("moved")
	err := e.inTx(ctx, func(tx Tx) error {
		ok, err := finishInTx(ctx, tx, jobID, version, store.Closing{State: state, Result: result, Error: errMsg}, e.now(), true)
		if err != nil {
			return err
		}
		if !ok {
			if _, err := tx.GetJob(ctx, jobID); err != nil {
				return err
			}
			return errMoved
		}
		return nil
	})
	if errors.Is(err, errMoved) {
		return false, nil
	}
	if err != nil {
		return false, e.errorf(err, "finish job %q", jobID)
	}
	return true, nil
}

// finishInTx is FinishJob's tree inside tx, at time at: false when the
// job is no longer open at version, with tasks already cancelled (the
// caller rolls back). c.Error is stored as it is. cancel false skips the
// cancel of unfinished tasks, for a job known to have none (closeInline):
// a round trip less on PostgreSQL.
func finishInTx(ctx context.Context, tx Tx, jobID string, version int64, c store.Closing, at time.Time, cancel bool) (bool, error) {
	if cancel {
		if err := tx.CancelTasks(ctx, jobID, at); err != nil {
			return false, err
		}
	}
	location := ""
	if c.Result != nil {
		location = store.ResultLocation(jobID)
	}
	j, ok, err := tx.CloseJob(ctx, JobClose{ID: jobID, State: c.State, FinishedAt: at, Error: c.Error,
		ResultLocation: location, Version: version})
	if err != nil || !ok {
		return false, err
	}
	if c.Result != nil {
		if err := tx.PutResult(ctx, jobID, c.Result); err != nil {
			return false, err
		}
	}
	if err := deliverClosed(ctx, tx, j); err != nil {
		return false, err
	}
	if c.State == warren.JobCompleted && j.Then != nil && j.NextJob == "" {
		// A job closed before (a redrive closing it again) started
		// its follow-up then: the chain never forks.
		return true, startFollowUp(ctx, tx, j, c.Result, at)
	}
	return true, nil
}

// deliverClosed makes the webhook delivery of closed job j, due when it
// closed, if it has a webhook: its id a new ULID, its body ClosedPayload.
func deliverClosed(ctx context.Context, tx Tx, j warren.Job) error {
	if j.WebhookURL == "" {
		return nil
	}
	at := j.CreatedAt
	if j.FinishedAt != nil {
		at = *j.FinishedAt
	}
	id := ulid.Make().String()
	err := tx.InsertDelivery(ctx, NewDelivery{ID: id, JobID: j.ID, Event: store.EventJobClosed,
		Body: ClosedPayload(id, j), At: at})
	if err != nil {
		return fmt.Errorf("write the webhook delivery: %w", err)
	}
	return nil
}

// validateFinishState returns an error naming state unless it is
// warren.JobCompleted or warren.JobFailed, the states FinishJob closes a
// job in: FinishJob refuses any other before it writes anything, or even
// looks the job up. A job is cancelled by CancelJob, which also records
// why, not by FinishJob.
func validateFinishState(state warren.JobState) error {
	if state != warren.JobCompleted && state != warren.JobFailed {
		return fmt.Errorf("state %q is not a closed state FinishJob sets (completed or failed)", state)
	}
	return nil
}

// closedJob is the job in a job.closed body: the fields, and field
// names, of the API's job JSON that say how it closed.
type closedJob struct {
	ID             string          `json:"id"`
	Type           string          `json:"type"`
	State          warren.JobState `json:"state"`
	ExpectedTasks  int64           `json:"expected_tasks"`
	CompletedTasks int64           `json:"completed_tasks"`
	FailedTasks    int64           `json:"failed_tasks"`
	CreatedAt      time.Time       `json:"created_at"`
	FinishedAt     *time.Time      `json:"finished_at"`
	Error          string          `json:"error"`
	ResultURL      string          `json:"result_url,omitempty"`
}

// closedBody is the body of a job.closed delivery.
type closedBody struct {
	ID    string    `json:"id"`
	Event string    `json:"event"`
	Job   closedJob `json:"job"`
}

// ClosedPayload returns the body of delivery id of the job.closed event
// (store.EventJobClosed) of job, as it just closed. The drivers store it
// with the delivery, so that every attempt sends the same bytes.
func ClosedPayload(id string, job warren.Job) []byte {
	j := closedJob{ID: job.ID, Type: job.Type, State: job.State, ExpectedTasks: job.ExpectedTasks,
		CompletedTasks: job.CompletedTasks, FailedTasks: job.FailedTasks, CreatedAt: job.CreatedAt.UTC(), Error: job.Error}
	if job.FinishedAt != nil {
		at := job.FinishedAt.UTC()
		j.FinishedAt = &at
	}
	if job.State == warren.JobCompleted && job.ResultLocation != "" {
		j.ResultURL = job.ResultLocation
	}
	body, err := json.Marshal(closedBody{ID: id, Event: store.EventJobClosed, Job: j})
	if err != nil { // strings, numbers and times: cannot fail
		panic(fmt.Sprintf("store: encode a job.closed body: %v", err))
	}
	return body
}
