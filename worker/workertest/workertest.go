// Package workertest runs warren task handlers in a program's own tests,
// without a broker. Run calls a handler with a task and reports what a
// worker would do with what the handler returned: complete the task with
// its result, retry it after a retry tier's delay, dead-letter it once its
// retries are spent, or fail it at once on a permanent error. The decision
// is the worker's own code: the outcome decision the worker settles every
// run with, worker.IsPermanent to tell permanent errors apart, and the
// worker's default retry tiers. A panic in the handler is a transient
// error with the worker's text, and so is a run past the task's time
// limit (Task.Timeout): the handler's context has the worker's deadline,
// and a run that ends at or after it is Retried, or DeadLettered on its
// last attempt, whatever the handler returned. This package's tests run
// the same tasks through a real worker to hold it to the worker's
// behaviour. RunBatch runs a worker.BatchHandlerFunc the same way, and
// RunWorker runs the handler a *worker.Worker has registered for the
// task's type, so a test covers the program's real wiring. RunReducer
// (and RunWorkerReducer) runs a worker.ReducerFunc over given map task
// outcomes, as the worker runs a job's reduce task.
//
//	res := workertest.Run(ctx, worker.Typed(resize), worker.Task{Payload: payload}, nil)
//	if res.Action != workertest.Completed {
//		t.Fatalf("resize: %v (%s)", res.Action, res.Err)
//	}
//
// What it does not do: it connects to nothing, publishes nothing (no
// result, retry or dead-letter message is built) and acks nothing; it does
// not wait a retry's delay or run the retry (run again with
// Task.Attempt+1 for that); it has no store, aggregator, server or job
// (a reducer reads the outcomes it is given, not the outcomes RPC),
// so a job's failure tolerance and closing are not exercised. What the
// worker does around a run is not modelled either: skipping the tasks of
// cancelled jobs, splitting redelivered batches, the broker's delivery
// limit and malformed messages, retrying a publish that fails. It calls
// no worker.Config.OnEvent and logs nothing. The handler runs on the
// caller's goroutine with the caller's ctx, which gets the task's deadline
// when Task.Timeout is set; like the worker, Run cannot stop a handler
// that ignores it, and waits for it to return.
package workertest

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/outcome"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/worker"
)

// DefaultJobID is the JobID of a task run with an empty JobID.
const DefaultJobID = "workertest-job"

// NoRetries, as a task's MaxRetries, runs it with no retries: the handler
// sees MaxRetries 0. A MaxRetries of 0 means warren.DefaultMaxRetries, as
// for a job submitted without max_retries.
const NoRetries = -1

// Opts tunes a run; nil means the defaults.
type Opts struct {
	// RetryTiers are the delays a Retried result's Delay is chosen from:
	// the nth retry waits the nth, every retry past the last waits the
	// last. Default protocol.DefaultRetryTiers for Run and RunBatch, the
	// worker's own (worker.Worker.RetryTiers) for RunWorker. Each must be
	// a positive whole number of milliseconds, as for
	// worker.Config.RetryTiers; Run panics otherwise.
	RetryTiers []time.Duration
	// MaxResultBytes is the largest result a run may give, in bytes of
	// JSON: a larger one is Failed with protocol.ReasonResultTooLarge, as
	// the worker fails it. Default protocol.DefaultMaxResultBytes for Run
	// and RunBatch, the worker's own (worker.Worker.MaxResultBytes) for
	// RunWorker.
	MaxResultBytes int
}

// Action is what the worker would do with a task after the run.
type Action int

// The actions. Failed and DeadLettered both end with the task
// dead-lettered and, once the aggregator records it, failed; Reason says
// which rule sent it there.
const (
	// Completed: the worker publishes Result.Output as the task's result.
	Completed Action = iota + 1
	// Retried: the run failed transiently (an error, a panic, or a run
	// past Task.Timeout) and the task has retries left; the worker
	// publishes it to the retry tier of Result.Delay, after which it runs
	// again with Attempt+1.
	Retried
	// Failed: the task is dead-lettered at once, without retries, with
	// Result.Reason protocol.ReasonPermanent (the handler returned an
	// error marked with worker.Permanent, or a result that does not
	// marshal to JSON), protocol.ReasonResultTooLarge (a result over
	// Opts.MaxResultBytes) or protocol.ReasonUnknownType (RunWorker: a
	// task message with no type).
	Failed
	// DeadLettered: the run failed transiently on the task's last
	// attempt (Attempt > MaxRetries); the task is dead-lettered with
	// Result.Reason protocol.ReasonRetriesExhausted.
	DeadLettered
	// Requeued: ctx was done when the handler returned. The worker
	// cancels its handlers' context only when it gives up on them at
	// shutdown, and then puts the task back on the queue whatever the
	// handler returned: it runs again, with the same attempt.
	Requeued
	// Unserved: the worker has no handler (RunWorker) or reducer
	// (RunWorkerReducer) for the task's type; it puts the task back, to
	// wait Result.Delay (its first retry tier) in a retry tier for a
	// worker that serves the type, without counting a retry (see
	// worker.EventUnserved).
	Unserved
)

// String names the action: "completed", "retried", "failed",
// "dead-lettered" or "requeued".
func (a Action) String() string {
	switch a {
	case Completed:
		return "completed"
	case Retried:
		return "retried"
	case Failed:
		return "failed"
	case DeadLettered:
		return "dead-lettered"
	case Requeued:
		return "requeued"
	case Unserved:
		return "unserved"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Result is what became of one task's run.
type Result struct {
	// Action is what the worker would do with the task.
	Action Action
	// Output is the task's result as the worker publishes it, as JSON
	// (Completed only).
	Output json.RawMessage
	// Spawned are the payloads of the tasks the run spawned
	// (worker.Task.Spawn), as JSON, in order: what the result carries
	// (Completed only; the worker drops the spawn of any other run).
	Spawned []json.RawMessage
	// Err is why the task did not complete: the handler's error, or its
	// panic as the worker reports it; the worker's timeout error for a
	// run that ended past its deadline ("worker: task timeout of 5s
	// exceeded", wrapping context.DeadlineExceeded); why its result does
	// not marshal; the worker's error for a type with no handler
	// (RunWorker); or context.Cause(ctx) when Requeued. It is nil when
	// Completed.
	Err error
	// Delay is how long the task waits before its retry: its retry tier's
	// delay (Retried only).
	Delay time.Duration
	// Reason is the dead letter's reason, a protocol.Reason constant
	// (Failed and DeadLettered only).
	Reason string
	// Task is the task as run, its zero fields filled with the defaults:
	// what the handler got.
	Task worker.Task
}

// Run runs h with task, as the worker runs a HandlerFunc, and returns
// what the worker would do with the outcome. Zero fields of task get
// defaults, so a test may give only a Payload: JobID DefaultJobID, TaskID
// 1, Attempt 1 (the first run), MaxRetries warren.DefaultMaxRetries (see
// NoRetries), and an empty Payload is JSON null; a zero Timeout is no
// limit. Run panics if h is nil or opts has invalid RetryTiers.
func Run(ctx context.Context, h worker.HandlerFunc, task worker.Task, opts *Opts) Result {
	if h == nil {
		panic("workertest: Run with a nil handler")
	}
	return run(ctx, h, withDefaults(task, 0), opts.limits(protocol.DefaultRetryTiers, protocol.DefaultMaxResultBytes))
}

// RunBatch runs h once with tasks, as the worker runs a BatchHandlerFunc
// for a task batch message, and returns one Result per task, in order:
// each task's Outcome is decided as Run decides a HandlerFunc's return. A
// panic in h, or a number of outcomes other than len(tasks), is a
// transient error for every task, as in the worker, and so is a call
// that ends past the tasks' Timeout: as in the worker, the one call has
// one deadline, its start plus that limit, which the tasks of a batch
// message share. Zero task fields get Run's defaults, except that a zero
// TaskID is the task's position in tasks, from 1. RunBatch returns nil,
// without calling h, for no tasks; it panics if h is nil, opts has
// invalid RetryTiers, or the tasks' Timeouts differ (a batch message has
// one).
func RunBatch(ctx context.Context, h worker.BatchHandlerFunc, tasks []worker.Task, opts *Opts) []Result {
	if h == nil {
		panic("workertest: RunBatch with a nil handler")
	}
	lim := opts.limits(protocol.DefaultRetryTiers, protocol.DefaultMaxResultBytes)
	if len(tasks) == 0 {
		return nil
	}
	ts := make([]worker.Task, len(tasks))
	for i, t := range tasks {
		if t.Timeout != tasks[0].Timeout {
			panic(fmt.Sprintf("workertest: RunBatch with tasks of different Timeouts (%s and %s); a batch message carries one", tasks[0].Timeout, t.Timeout))
		}
		ts[i] = withDefaults(t, i)
	}
	return runBatch(ctx, h, ts, lim)
}

// RunWorker runs the handler w has registered for task.Type, as w would
// for a single task message, with Run's defaults for task's zero fields
// and w's retry tiers unless opts has its own: a HandlerFunc as Run does,
// a BatchHandlerFunc with a batch of one as RunBatch does. A type with no
// handler is Unserved, as w would put it back for a worker that serves
// it (a task with no type at all is Failed with
// protocol.ReasonUnknownType). RunWorker does not start w and needs no broker; w
// need not be running. It panics if opts has invalid RetryTiers.
func RunWorker(ctx context.Context, w *worker.Worker, task worker.Task, opts *Opts) Result {
	lim := opts.limits(w.RetryTiers(), w.MaxResultBytes())
	t := withDefaults(task, 0)
	h, batch, ok := w.Handler(t.Type)
	switch {
	case !ok && t.Type == "":
		return Result{Action: Failed, Reason: protocol.ReasonUnknownType, Err: outcome.UnknownType(t.Type), Task: t}
	case !ok:
		return Result{Action: Unserved, Delay: lim.tiers[0], Err: outcome.UnknownType(t.Type), Task: t}
	case batch != nil:
		return runBatch(ctx, batch, []worker.Task{t}, lim)[0]
	default:
		return run(ctx, h, t, lim)
	}
}

func run(ctx context.Context, h worker.HandlerFunc, t worker.Task, lim limits) Result {
	// The Result's Task is the task as given, its defaults filled in,
	// without what records the handler's spawn.
	run, spawns := attachSpawns(t)
	start := time.Now()
	value, err := call(ctx, h, run, start)
	elapsed := time.Since(start)
	if ctx.Err() != nil {
		return requeued(ctx, t)
	}
	return decide(outcome.Run{Value: value, Err: err, Timeout: t.Timeout, Elapsed: elapsed, MaxResult: lim.maxResult}, t, spawns, lim.tiers)
}

func runBatch(ctx context.Context, h worker.BatchHandlerFunc, tasks []worker.Task, lim limits) []Result {
	spawns := make([]*outcome.Spawns, len(tasks))
	runs := make([]worker.Task, len(tasks))
	for i := range tasks {
		runs[i], spawns[i] = attachSpawns(tasks[i])
	}
	start := time.Now()
	outs := callBatch(ctx, h, runs, start)
	elapsed := time.Since(start)
	res := make([]Result, len(tasks))
	for i, t := range tasks {
		if ctx.Err() != nil {
			res[i] = requeued(ctx, t)
		} else {
			res[i] = decide(outcome.Run{Value: outs[i].Value, Err: outs[i].Err, Timeout: t.Timeout, Elapsed: elapsed, MaxResult: lim.maxResult}, t, spawns[i], lim.tiers)
		}
	}
	return res
}

// call runs h, started at start, as the worker does: with the task's
// deadline, and a panic is a transient error with the worker's text.
func call(ctx context.Context, h worker.HandlerFunc, t worker.Task, start time.Time) (v any, err error) {
	ctx, cancel := outcome.Context(ctx, start, t.Timeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			v, err = nil, outcome.HandlerPanicked(p)
		}
	}()
	return h(ctx, t)
}

// callBatch runs h, started at start, as the worker does: with one
// deadline for the call, and a panic or an outcome count other than
// len(tasks) is a transient error for every task, with the worker's text.
func callBatch(ctx context.Context, h worker.BatchHandlerFunc, tasks []worker.Task, start time.Time) (outs []worker.Outcome) {
	ctx, cancel := outcome.Context(ctx, start, tasks[0].Timeout)
	defer cancel()
	fail := func(err error) []worker.Outcome {
		all := make([]worker.Outcome, len(tasks))
		for i := range all {
			all[i].Err = err
		}
		return all
	}
	defer func() {
		if p := recover(); p != nil {
			outs = fail(outcome.BatchHandlerPanicked(p))
		}
	}()
	outs = h(ctx, tasks)
	if len(outs) != len(tasks) {
		return fail(outcome.WrongOutcomeCount(len(outs), len(tasks)))
	}
	return outs
}

// decide maps the worker's decision on a run of t, which spawned spawns,
// onto a Result.
func decide(run outcome.Run, t worker.Task, spawns *outcome.Spawns, tiers []time.Duration) Result {
	d := outcome.Of(run, worker.IsPermanent, t.Attempt, t.MaxRetries, tiers)
	d = outcome.WithSpawn(d, spawns, spawnLimit)
	r := Result{Err: d.Err, Reason: d.Reason, Task: t}
	switch d.Action {
	case outcome.Complete:
		r.Action, r.Output, r.Spawned = Completed, d.Result, d.Spawn
	case outcome.Retry:
		r.Action, r.Delay = Retried, d.Delay
	case outcome.Fail:
		r.Action = Failed
	case outcome.DeadLetter:
		r.Action = DeadLettered
	default:
		// The worker learned an action this package does not know: a
		// Result would misreport it.
		panic(fmt.Sprintf("workertest: the worker's decision %v has no Action", d.Action))
	}
	return r
}

func requeued(ctx context.Context, t worker.Task) Result {
	return Result{Action: Requeued, Err: context.Cause(ctx), Task: t}
}

// spawnLimit is the most bytes of JSON a run's spawn and result may
// take: what one result message of the default size carries.
const spawnLimit = protocol.DefaultMaxMessageBytes - protocol.EnvelopeBytes

// attachSpawns returns t with its Spawn recording into the Spawns it
// returns, as the worker's tasks do.
func attachSpawns(t worker.Task) (worker.Task, *outcome.Spawns) {
	s := outcome.NewSpawns(outcome.MaxSpawnBytes, nil)
	return outcome.AttachSpawns.(func(worker.Task, *outcome.Spawns) worker.Task)(t, s), s
}

// withDefaults fills the zero fields of the i-th task of a run.
func withDefaults(t worker.Task, i int) worker.Task {
	if t.JobID == "" {
		t.JobID = DefaultJobID
	}
	if t.TaskID == 0 {
		t.TaskID = int64(i) + 1
	}
	if t.Attempt == 0 {
		t.Attempt = 1
	}
	switch t.MaxRetries {
	case 0:
		t.MaxRetries = warren.DefaultMaxRetries
	case NoRetries:
		t.MaxRetries = 0
	}
	if len(t.Payload) == 0 {
		t.Payload = json.RawMessage("null")
	}
	return t
}

// limits are what decides a run's outcome besides the run itself.
type limits struct {
	tiers     []time.Duration
	maxResult int
}

// limits returns the limits of a run: o's, or else the defaults given.
func (o *Opts) limits(tiers []time.Duration, maxResult int) limits {
	if o != nil && len(o.RetryTiers) > 0 {
		tiers = o.RetryTiers
	}
	if err := broker.CheckRetryTiers(tiers); err != nil {
		panic(fmt.Sprintf("workertest: Opts.RetryTiers: %v", err))
	}
	if o != nil && o.MaxResultBytes > 0 {
		maxResult = o.MaxResultBytes
	}
	return limits{tiers: tiers, maxResult: maxResult}
}
