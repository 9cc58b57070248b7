package workertest

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"time"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/outcome"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/worker"
)

// RunReducer runs fn as the worker runs a reducer for job's reduce task,
// with outcomes as the map tasks' outcomes the outcomes RPC would serve,
// and returns what the worker would do with the reduce task: Completed
// with the job's result as Output, Retried, DeadLettered or Failed as
// for a task (a Permanent error, a panic, a run past job.Timeout), or
// Requeued. Result.Task is the reduce task as a task: TaskID 0, and
// job's JobID, Type, Attempt, MaxRetries, Timeout and Payload.
//
// Zero fields of job get defaults as Run gives a task's (JobID
// DefaultJobID, Attempt 1, MaxRetries warren.DefaultMaxRetries or none
// with NoRetries, a JSON null Payload), and ExpectedTasks is then
// len(outcomes). An outcome with no State is completed. There is no
// broker: the iterator yields outcomes in order, and no read of it
// fails. RunReducer panics if fn is nil, opts has invalid RetryTiers, or
// the outcomes' task ids do not increase from 1 or more, as a server's
// never fail to.
func RunReducer(ctx context.Context, fn worker.ReducerFunc, job worker.ReduceJob, outcomes []worker.TaskOutcome, opts *Opts) Result {
	if fn == nil {
		panic("workertest: RunReducer with a nil reducer")
	}
	return runReducer(ctx, fn, job, outcomes, opts.limits(protocol.DefaultRetryTiers, protocol.DefaultMaxResultBytes))
}

// RunWorkerReducer runs the reducer w has registered for job.Type as
// RunReducer does, with w's retry tiers and result limit unless opts has
// its own. A type with no reducer is Unserved, as w would put its reduce
// task back for a worker that has one.
func RunWorkerReducer(ctx context.Context, w *worker.Worker, job worker.ReduceJob, outcomes []worker.TaskOutcome, opts *Opts) Result {
	lim := opts.limits(w.RetryTiers(), w.MaxResultBytes())
	fn, ok := w.ReducerFor(job.Type)
	if !ok {
		j := reduceDefaults(job, outcomes)
		return Result{Action: Unserved, Delay: lim.tiers[0], Err: outcome.UnknownReducer(j.Type), Task: reduceTask(j)}
	}
	return runReducer(ctx, fn, job, outcomes, lim)
}

func runReducer(ctx context.Context, fn worker.ReducerFunc, job worker.ReduceJob, outcomes []worker.TaskOutcome, lim limits) Result {
	job = reduceDefaults(job, outcomes)
	seq := outcomeSeq(outcomes)
	t := reduceTask(job)
	start := time.Now()
	value, err := callReducer(ctx, fn, job, seq, start)
	elapsed := time.Since(start)
	if ctx.Err() != nil {
		return requeued(ctx, t)
	}
	return decide(outcome.Run{Value: value, Err: err, Timeout: t.Timeout, Elapsed: elapsed, MaxResult: lim.maxResult}, t, nil, lim.tiers)
}

// callReducer runs fn as the worker does: with the task's deadline, and
// a panic is a transient error with the worker's text.
func callReducer(ctx context.Context, fn worker.ReducerFunc, job worker.ReduceJob, seq iter.Seq2[worker.TaskOutcome, error], start time.Time) (v any, err error) {
	ctx, cancel := outcome.Context(ctx, start, job.Timeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			v, err = nil, outcome.HandlerPanicked(p)
		}
	}()
	return fn(ctx, job, seq)
}

// outcomeSeq yields outcomes in order, each with a State.
func outcomeSeq(outcomes []worker.TaskOutcome) iter.Seq2[worker.TaskOutcome, error] {
	var prev int64
	for i, o := range outcomes {
		if o.TaskID <= prev {
			panic(fmt.Sprintf("workertest: outcome %d has task id %d, after %d: ids increase from 1", i, o.TaskID, prev))
		}
		prev = o.TaskID
	}
	return func(yield func(worker.TaskOutcome, error) bool) {
		for _, o := range outcomes {
			if o.State == "" {
				o.State = protocol.StatusCompleted
			}
			if !yield(o, nil) {
				return
			}
		}
	}
}

// reduceDefaults fills the zero fields of a reduce run's job.
func reduceDefaults(j worker.ReduceJob, outcomes []worker.TaskOutcome) worker.ReduceJob {
	if j.JobID == "" {
		j.JobID = DefaultJobID
	}
	if j.Attempt == 0 {
		j.Attempt = 1
	}
	switch j.MaxRetries {
	case 0:
		j.MaxRetries = warren.DefaultMaxRetries
	case NoRetries:
		j.MaxRetries = 0
	}
	if len(j.Payload) == 0 {
		j.Payload = json.RawMessage("null")
	}
	if j.ExpectedTasks == 0 {
		j.ExpectedTasks = int64(len(outcomes))
	}
	return j
}

// reduceTask is the reduce task of j as a task.
func reduceTask(j worker.ReduceJob) worker.Task {
	return worker.Task{JobID: j.JobID, TaskID: protocol.ReduceTaskID, Type: j.Type, Attempt: j.Attempt,
		MaxRetries: j.MaxRetries, Timeout: j.Timeout, Payload: j.Payload}
}
