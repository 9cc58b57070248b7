package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"sync"
	"time"

	"github.com/warrenhq/warren/internal/outcome"
	"github.com/warrenhq/warren/protocol"
)

// ReducerFunc runs a job's reduce task: once every map task of a job
// whose reduce names this type is accounted for, warren sends one reduce
// task, and the reducer's return is the job's result. It is marshalled
// to JSON as a HandlerFunc's result is, and a nil error completes the
// reduce task; a Permanent error fails it (and the job) at once, any
// other error or a panic is retried through the retry tiers, as for a
// task.
//
// outcomes yields the map tasks' outcomes in task id order, read from
// the server page by page as the reducer iterates (never all at once:
// a reducer that stops early reads fewer pages); iterating it again
// starts again from the first. When a page cannot be read it yields one
// zero TaskOutcome with the error, and stops: the run then fails
// transiently whatever the reducer returns (the outcomes were not all
// seen), unless the server said the job no longer reduces at this
// generation (cancelled, closed, or reduced by a newer run), in which
// case the reduce task is acked and nothing is published. Return the
// error, or anything: it is not recorded.
//
// ctx is as a HandlerFunc's: it has the deadline of the job's task
// timeout from the call's start, and a run past it is a transient
// failure. A reduce task of a cancelled job is skipped, like its tasks.
type ReducerFunc func(ctx context.Context, job ReduceJob, outcomes iter.Seq2[TaskOutcome, error]) (any, error)

// ReduceJob is a reduce task as a reducer sees it.
type ReduceJob struct {
	// JobID is the job being reduced.
	JobID string
	// Type is the reduce task's type, the reducer's name.
	Type string
	// Payload is the payload of the job's reduce (JSON null when it has
	// none).
	Payload json.RawMessage
	// ExpectedTasks is the number of the job's map tasks.
	ExpectedTasks int64
	// Attempt is this run's number: 1 on the first run, 2 on the first
	// retry, and so on.
	Attempt int
	// MaxRetries is how many retries the reduce task gets.
	MaxRetries int
	// Timeout is the time limit of each run (the job's task_timeout); 0
	// means none.
	Timeout time.Duration
	// Generation is the reduce task's generation (x-generation), which
	// the outcomes RPC is asked at; 0 when unknown.
	Generation int
}

// IdempotencyKey returns "<job_id>:0", the same on every run of the
// job's reduce task (its message_id).
func (j ReduceJob) IdempotencyKey() string { return protocol.MessageID(j.JobID, protocol.ReduceTaskID) }

// TaskOutcome is one map task's outcome, as a reducer reads it.
type TaskOutcome struct {
	// TaskID is the task's id, 1..N.
	TaskID int64
	// State is protocol.StatusCompleted or protocol.StatusFailed.
	State string
	// Result is the task's result as JSON, when it completed.
	Result json.RawMessage
	// Error is the task's failure, when it failed.
	Error string
}

// Completed reports whether the task completed.
func (o TaskOutcome) Completed() bool { return o.State == protocol.StatusCompleted }

// Reducer registers fn for the reduce tasks whose AMQP type property is
// taskType and returns w, so calls chain. A type may have both a task
// handler (Handle, HandleBatch) and a reducer: a reduce task runs the
// reducer, a task the handler. A reduce task of a type with no reducer
// is dead-lettered with protocol.ReasonUnknownType. Reducer panics if
// taskType is empty, fn is nil, or taskType already has a reducer.
func (w *Worker) Reducer(taskType string, fn ReducerFunc) *Worker {
	if taskType == "" {
		panic("worker: Reducer with an empty task type")
	}
	if fn == nil {
		panic(fmt.Sprintf("worker: Reducer(%q) with a nil reducer", taskType))
	}
	return w.register("Reducer", taskType, handlerSet{reduce: fn})
}

// ReducerFor returns the reducer registered for taskType; ok is false
// when it has none. It lets tests run the reducers a program really
// registers (see worker/workertest).
func (w *Worker) ReducerFor(taskType string) (fn ReducerFunc, ok bool) { return w.reducer(taskType) }

// reduce runs d, a reduce task message, through its type's reducer, with
// the outcomes read over the outcomes RPC, and settles it: its result
// published as task 0's and then acked, a retry or a dead letter as for
// a task, or, when the server says the job no longer reduces at d's
// generation, acked with nothing published.
func (s *session) reduce(d *delivery) {
	fn, ok := s.w.reducer(d.msg.Type)
	if !ok {
		s.unserved(d, outcome.UnknownReducer(d.msg.Type))
		return
	}
	t := d.tasks[0]
	job := ReduceJob{JobID: t.JobID, Type: t.Type, Payload: t.Payload, ExpectedTasks: d.msg.Tasks[0].ExpectedTasks,
		Attempt: t.Attempt, MaxRetries: t.MaxRetries, Timeout: t.Timeout, Generation: d.msg.Generation}
	src := &rpcSource{conn: s.rpc, names: s.w.names, jobID: job.JobID, generation: job.Generation, timeout: s.w.outcomesTimeout}
	defer src.close()
	start := time.Now()
	value, err := s.callReducer(s.handlerContext(d), fn, job, src, start)
	end := time.Now()
	if s.handlers.Err() != nil {
		s.requeue(d)
		return
	}
	if rpcErr := src.failure(); rpcErr != nil {
		if isStale(rpcErr) {
			s.taskLog(t).Info("worker: reduce task dropped; its job no longer reduces at this generation", "error", rpcErr)
			d.span.AddEvent("skipped: the job no longer reduces")
			s.skip(d)
			return
		}
		value, err = nil, rpcErr
	}
	s.settleRuns(d, []taskRun{{task: t, value: value, err: err, started: start.UTC(), finished: end.UTC(), elapsed: end.Sub(start)}})
}

// callReducer runs fn, started at start, over the outcomes of src, with
// the task's deadline, turning a panic into a transient error.
func (s *session) callReducer(base context.Context, fn ReducerFunc, job ReduceJob, src outcomeSource, start time.Time) (v any, err error) {
	ctx, cancel := outcome.Context(base, start, job.Timeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			err = panicked(outcome.HandlerPanicked(p), p)
			s.log.Error("worker: reducer panicked", "job_id", job.JobID, "type", job.Type, "panic", fmt.Sprint(p), "stack", shortStack())
		}
	}()
	return fn(ctx, job, outcomesOf(ctx, src))
}

// isStale reports whether err is the outcomes RPC's "stale" answer.
func isStale(err error) bool {
	var oe *protocol.OutcomesError
	return errors.As(err, &oe) && oe.Code == protocol.OutcomesStale
}

// outcomeSource reads pages of a job's outcomes: those after the task id
// after, and the after of the next page (nil at the end).
type outcomeSource interface {
	page(ctx context.Context, after int64) ([]protocol.TaskOutcome, *int64, error)
	// fail records err, the first failure of a page, for the run.
	fail(err error)
}

// outcomesOf is the iterator a reducer gets: the outcomes of src, a page
// at a time as the iteration goes, each failure yielded once with a zero
// TaskOutcome, after which the iteration ends.
func outcomesOf(ctx context.Context, src outcomeSource) iter.Seq2[TaskOutcome, error] {
	return func(yield func(TaskOutcome, error) bool) {
		var after int64
		for {
			page, next, err := src.page(ctx, after)
			if err != nil {
				src.fail(err)
				yield(TaskOutcome{}, err)
				return
			}
			for _, o := range page {
				if !yield(TaskOutcome{TaskID: o.TaskID, State: o.State, Result: o.Result, Error: o.Error}, nil) {
					return
				}
			}
			if next == nil {
				return
			}
			after = *next
		}
	}
}

// errorOnce keeps the first failure of a run's outcome source.
type errorOnce struct {
	mu  sync.Mutex
	err error
}

func (e *errorOnce) fail(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err == nil {
		e.err = err
	}
}

// failure is the first failure recorded; nil when every page was read.
func (e *errorOnce) failure() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}
