package aggregator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/reduce"
	"github.com/warrenhq/warren/store"
)

// RequestClose asks the aggregator to close a job that is ready to close
// (for example one whose last task the reconciler failed). It never
// blocks: when its queue is full, the periodic scan finds the job.
func (a *Aggregator) RequestClose(id string) { a.requestClose(closeRequest{id: id}) }

// closeRequest is a job to close, and the span of the recording that made
// it ready, which its close span continues (invalid when none did).
type closeRequest struct {
	id    string
	trace trace.SpanContext
}

// requestClose queues a job for the closer without blocking the consumer;
// if the queue is full, the periodic scan finds the job.
func (a *Aggregator) requestClose(r closeRequest) {
	select {
	case a.close <- r:
	default:
	}
}

// closer closes jobs handed to it and, periodically, those the store says
// are ready (left half-closed by a crash, or missed).
func (a *Aggregator) closer(ctx context.Context) {
	a.scan(ctx)
	tick := time.NewTicker(a.cfg.ScanInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-a.close:
			if err := a.CloseJob(trace.ContextWithSpanContext(ctx, r.trace), r.id); err != nil && ctx.Err() == nil {
				a.cfg.Logger.Error("aggregator: closing job failed; the scan retries it", "job_id", r.id, "error", err)
			}
		case <-tick.C:
			a.scan(ctx)
		}
	}
}

// scanWindow is how many jobs ready to close one scan asks the store for,
// beyond those this aggregator cannot close.
const scanWindow = 100

// maxUnclosable bounds how many jobs this aggregator remembers it cannot
// close; past it, the scan's window may fill with them again.
const maxUnclosable = 10_000

// scan closes the jobs the store says are ready, looking past those
// whose reducer this aggregator does not have (reported once each).
func (a *Aggregator) scan(ctx context.Context) {
	a.unclosableMu.Lock()
	skip := len(a.unclosable)
	a.unclosableMu.Unlock()
	ids, err := a.cfg.Store.JobsToClose(ctx, scanWindow+skip)
	if err != nil {
		if ctx.Err() == nil {
			a.cfg.Logger.Warn("aggregator: looking for jobs to close failed", "error", err)
		}
		return
	}
	a.forgetClosedElsewhere(ids, len(ids) < scanWindow+skip)
	for _, id := range ids {
		if a.isUnclosable(id) {
			continue
		}
		if err := a.CloseJob(ctx, id); err != nil && ctx.Err() == nil {
			a.cfg.Logger.Error("aggregator: closing job failed", "job_id", id, "error", err)
		}
	}
}

// markUnclosable remembers that job id cannot be closed here; it reports
// whether the job is new to the set.
func (a *Aggregator) markUnclosable(id string) bool {
	a.unclosableMu.Lock()
	defer a.unclosableMu.Unlock()
	if a.unclosable[id] || len(a.unclosable) >= maxUnclosable {
		return !a.unclosable[id]
	}
	if a.unclosable == nil {
		a.unclosable = map[string]bool{}
	}
	a.unclosable[id] = true
	return true
}

func (a *Aggregator) isUnclosable(id string) bool {
	a.unclosableMu.Lock()
	defer a.unclosableMu.Unlock()
	return a.unclosable[id]
}

// forgetClosedElsewhere drops the unclosable jobs the store no longer
// lists as ready (another server closed them, or they were cancelled or
// reopened), when ids is every job ready to close.
func (a *Aggregator) forgetClosedElsewhere(ids []string, complete bool) {
	if !complete {
		return
	}
	ready := make(map[string]bool, len(ids))
	for _, id := range ids {
		ready[id] = true
	}
	a.unclosableMu.Lock()
	defer a.unclosableMu.Unlock()
	for id := range a.unclosable {
		if !ready[id] {
			delete(a.unclosable, id)
		}
	}
}

// closeTries bounds how often CloseJob starts over when the job changed
// between its read and its finish. A job that keeps changing (results
// still arriving for a fail-fast job, replays in a row) is left to the
// periodic scan.
const closeTries = 5

// CloseJob closes a job that is ready to close: completed, with its
// reduced result, when its failures are within tolerance, else failed. It
// is idempotent and safe to run from several aggregators at once: exactly
// one of them closes the job; it returns nil when the job was already
// closed or is not ready.
//
// The close applies only to the job as it was read: when the job changed
// meanwhile (an outcome, a redrive, a replay, the reconciler), the store's
// FinishJob refuses it and CloseJob reads the job again and starts over,
// at most closeTries times; then it returns an error and the scan tries
// later.
//
// Each try that finds the job ready makes a warren.job.close span, a
// child of the span in ctx when there is one.
func (a *Aggregator) CloseJob(ctx context.Context, id string) error {
	for range closeTries {
		again, err := a.closeOnce(ctx, id)
		if err != nil || !again {
			return err
		}
	}
	return fmt.Errorf("aggregator: job %s changed under each of %d closes; the scan tries again", id, closeTries)
}

// closeOnce is one try of CloseJob. again says the job changed after it
// was read, and the close was not applied.
func (a *Aggregator) closeOnce(ctx context.Context, id string) (again bool, err error) {
	job, err := a.cfg.Store.GetJob(ctx, id)
	if err != nil {
		return false, err
	}
	if job.State.Terminal() || !store.ReadyToClose(job) {
		return false, nil
	}
	ctx, span := a.startClose(ctx, job)
	defer func() { endClose(span, again, err) }()
	state, result, msg := warren.JobCompleted, []byte(nil), ""
	switch {
	case job.ReduceState == warren.ReduceCompleted || job.ReduceState == warren.ReduceFailed:
		if state, result, msg, err = a.reduced(ctx, job); err != nil {
			return false, err
		}
	case !job.Policy.Tolerates(job.FailedTasks, job.ExpectedTasks):
		state, msg = warren.JobFailed, overTolerance(job)
	case job.Policy.ReduceTask != nil:
		return a.startReduce(ctx, job)
	default:
		scan := func(fn func(taskID int64, state warren.TaskState, result json.RawMessage) error) error {
			return a.cfg.Store.ScanResults(ctx, job.ID, fn)
		}
		reduced, refused, err := a.reduce(job, scan)
		switch {
		case errors.Is(err, reduce.ErrUnknownReducer):
			if !a.markUnclosable(id) {
				return false, nil // reported already
			}
			a.cfg.Logger.Warn("aggregator: the job's reducer is not registered on this server; the job stays open for a server that has it",
				"job_id", id, "reducer", reducerName(job), "error", err)
			if a.cfg.Hooks.OnUnknownReducer != nil {
				a.cfg.Hooks.OnUnknownReducer(id, reducerName(job))
			}
			return false, nil
		case err != nil:
			return false, err
		}
		c := a.closing(reduced, refused)
		state, result, msg = c.State, c.Result, c.Error
	}
	closed, err := a.cfg.Store.FinishJob(ctx, id, job.Version, state, result, msg)
	if err != nil {
		return false, fmt.Errorf("aggregator: finish job %s: %w", id, err)
	}
	if !closed {
		return true, nil // changed since the read, or closed by another: read it again
	}
	a.closed(ctx, span, job, state, msg)
	return false, nil
}

// overTolerance is the error of a job closed failed because its failures
// are over its tolerance.
func overTolerance(job warren.Job) string {
	return fmt.Sprintf("%d of %d tasks failed, over the tolerance", job.FailedTasks, job.ExpectedTasks)
}

// closing is how a job whose reducer gave result (or refused, with
// refused) closes: completed with it, or failed with why.
func (a *Aggregator) closing(result []byte, refused error) store.Closing {
	switch {
	case refused != nil:
		return store.Closing{State: warren.JobFailed, Error: refused.Error()}
	case len(result) > a.cfg.MaxResultBytes:
		return store.Closing{State: warren.JobFailed,
			Error: fmt.Sprintf("the reduced result is %d bytes, over the limit of %d bytes", len(result), a.cfg.MaxResultBytes)}
	}
	return store.Closing{State: warren.JobCompleted, Result: result}
}

// closed reports job's close (as state, with msg), which this aggregator
// made: the log line, the close span's outcome, the hooks, and the
// follow-up it started, if any.
func (a *Aggregator) closed(ctx context.Context, span trace.Span, job warren.Job, state warren.JobState, msg string) {
	a.cfg.Logger.Info("job closed", "job_id", job.ID, "state", state,
		"completed", job.CompletedTasks, "failed", job.FailedTasks, "expected", job.ExpectedTasks)
	closedSpan(span, state, msg)
	if a.cfg.Hooks.OnJobFinished != nil {
		a.cfg.Hooks.OnJobFinished(job, state)
	}
	if a.cfg.Hooks.OnJobClosed != nil {
		a.cfg.Hooks.OnJobClosed(job.ID, state)
	}
	if state == warren.JobCompleted && job.Then != nil && job.NextJob == "" {
		a.followedUp(ctx, job.ID)
	}
}

// decideInline is the store.CloseDecider of the aggregator's batches
// (store.Store's ApplyOutcomesClosing): a job the batch made ready, with
// every task finished and no reduce task, closes in the batch's own
// transaction, as closeOnce would close it. A reducer this server does
// not have leaves the job to closeOnce, which reports it.
func (a *Aggregator) decideInline(_ context.Context, job warren.Job, scan store.ResultScan) (store.Closing, bool, error) {
	if !job.Policy.Tolerates(job.FailedTasks, job.ExpectedTasks) {
		return store.Closing{State: warren.JobFailed, Error: overTolerance(job)}, true, nil
	}
	result, refused, err := a.reduce(job, scan)
	switch {
	case errors.Is(err, reduce.ErrUnknownReducer):
		return store.Closing{}, false, nil
	case err != nil:
		return store.Closing{}, false, fmt.Errorf("aggregator: reduce job %s in its last outcomes' transaction: %w", job.ID, err)
	}
	return a.closing(result, refused), true, nil
}

// closedInline reports a job its batch's transaction closed (decideInline),
// with a close span that continues the recording's (sc).
func (a *Aggregator) closedInline(ctx context.Context, c store.ClosedJob, sc trace.SpanContext) {
	ctx, span := a.startClose(trace.ContextWithSpanContext(ctx, sc), c.Job)
	a.closed(ctx, span, c.Job, c.State, c.Error)
	endClose(span, false, nil)
}

// followedUp reports the follow-up that the close of job id started
// (Hooks.OnFollowUp), reading the job again for its NextJob, which the
// close set. A failed read is only logged: the follow-up exists, and the
// relay's next round finds its tasks all the same.
func (a *Aggregator) followedUp(ctx context.Context, id string) {
	closed, err := a.cfg.Store.GetJob(ctx, id)
	if err != nil {
		a.cfg.Logger.Warn("aggregator: reading the follow-up of a closed job failed", "job_id", id, "error", err)
		return
	}
	if closed.NextJob == "" {
		return
	}
	a.cfg.Logger.Info("follow-up job started", "job_id", id, "next_job", closed.NextJob)
	if a.cfg.Hooks.OnFollowUp != nil {
		a.cfg.Hooks.OnFollowUp(id, closed.NextJob)
	}
}

// startReduce starts the reduce task of job, ready to close within its
// tolerance (store.StartReduce): the job stays open, reducing, until the
// task's outcome makes it ready again. again says the job moved since it
// was read.
func (a *Aggregator) startReduce(ctx context.Context, job warren.Job) (again bool, err error) {
	started, err := a.cfg.Store.StartReduce(ctx, job.ID, job.Version)
	if err != nil {
		return false, fmt.Errorf("aggregator: start the reduce task of job %s: %w", job.ID, err)
	}
	if !started {
		return true, nil
	}
	a.cfg.Logger.Info("job reducing", "job_id", job.ID, "reduce_type", job.Policy.ReduceTask.Type,
		"completed", job.CompletedTasks, "failed", job.FailedTasks, "expected", job.ExpectedTasks)
	if a.cfg.Hooks.OnReduceStarted != nil {
		a.cfg.Hooks.OnReduceStarted(job.ID)
	}
	return false, nil
}

// reduced is how job closes once its reduce task has an outcome:
// completed with the task's result, or failed with its error (or when the
// result is over Config.MaxResultBytes).
func (a *Aggregator) reduced(ctx context.Context, job warren.Job) (state warren.JobState, result []byte, msg string, err error) {
	task, err := a.cfg.Store.GetTask(ctx, job.ID, warren.ReduceTaskID)
	if err != nil {
		return "", nil, "", fmt.Errorf("aggregator: read the reduce task of job %s: %w", job.ID, err)
	}
	switch {
	case job.ReduceState == warren.ReduceFailed:
		return warren.JobFailed, nil, "reduce task failed: " + task.Error, nil
	case len(task.Result) > a.cfg.MaxResultBytes:
		return warren.JobFailed, nil, fmt.Sprintf("the reduce task's result is %d bytes, over the limit of %d bytes", len(task.Result), a.cfg.MaxResultBytes), nil
	case len(task.Result) == 0:
		return warren.JobCompleted, []byte("null"), "", nil
	}
	return warren.JobCompleted, task.Result, "", nil
}

// reduce runs the job's reducer over its results, as scan reads them. refused is the reducer
// refusing them (a *reduce.Error, or a result it cannot make): the job
// fails with it. err is what leaves the job open instead: a reducer this
// server does not know (it wraps reduce.ErrUnknownReducer), or the store
// failing while the results were scanned (a connection reset, a
// timeout), which the next close retries.
func (a *Aggregator) reduce(job warren.Job, scan store.ResultScan) (result []byte, refused, err error) {
	var storeErr error
	result, err = a.cfg.Reducers.Reduce(reducerName(job), func(fn func(taskID int64, failed bool, result json.RawMessage) error) error {
		var fnErr error
		err := scan(func(taskID int64, state warren.TaskState, result json.RawMessage) error {
			fnErr = fn(taskID, state != warren.TaskCompleted, result)
			return fnErr
		})
		// The scan returns fn's error as it is; any other is the store's.
		if err != nil && (fnErr == nil || !errors.Is(err, fnErr)) {
			storeErr = err
		}
		return err
	})
	switch {
	case storeErr != nil:
		return nil, nil, fmt.Errorf("aggregator: scan the results of job %s: %w", job.ID, storeErr)
	case errors.Is(err, reduce.ErrUnknownReducer):
		return nil, nil, err
	case err != nil:
		return nil, err, nil
	}
	return result, nil, nil
}

// reducerName is the name of job's reducer.
func reducerName(job warren.Job) string {
	if job.Policy.Reduce == "" {
		return reduce.Default
	}
	return job.Policy.Reduce
}
