// Package outcome decides, in one place, what becomes of one run of a
// task: its result, a retry through a delay tier, or a dead letter. The
// worker settles every run with Of, and worker/workertest runs handlers
// through the same decision without a broker.
package outcome

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/warrenhq/warren/protocol"
)

// Action is what becomes of a task after one run.
type Action int

const (
	// Complete publishes the run's result.
	Complete Action = iota
	// Fail dead-letters the task at once: the error is permanent.
	Fail
	// Retry runs the task again after a delay, through a delay tier.
	Retry
	// DeadLetter dead-letters the task: its retries are spent.
	DeadLetter
)

// String names the action.
func (a Action) String() string {
	switch a {
	case Complete:
		return "complete"
	case Fail:
		return "fail"
	case Retry:
		return "retry"
	case DeadLetter:
		return "dead-letter"
	}
	return "unknown"
}

// Decision is the outcome of one run.
type Decision struct {
	// Action is what becomes of the task.
	Action Action
	// Result is the run's value as JSON (Complete).
	Result json.RawMessage
	// Spawn are the payloads of the tasks the run spawned (Complete, after
	// WithSpawn): all of them, in order.
	Spawn []json.RawMessage
	// SpawnParts, when the spawn and the result do not fit in one
	// message, are Spawn cut into the parts that each go in a message of
	// their own (protocol.Result.SpawnParts), the last with the result.
	SpawnParts [][]json.RawMessage
	// Err is why the run failed (every other action).
	Err error
	// Delay is how long a retry waits: its tier's delay (Retry).
	Delay time.Duration
	// Reason is the dead letter's protocol reason (Fail, DeadLetter).
	Reason string
}

// Run is one run of a task as its handler ended it.
type Run struct {
	// Value and Err are what the handler returned.
	Value any
	Err   error
	// Timeout is the run's time limit, the task's Timeout (0: none): its
	// handler's context had the deadline start + Timeout (Context).
	Timeout time.Duration
	// Elapsed is how long the handler ran, from the start its deadline
	// counts from to its return, on a monotonic clock.
	Elapsed time.Duration
	// MaxResult is the largest result the run may give, in bytes of JSON;
	// 0 means no limit.
	MaxResult int
}

// Overran reports whether the run ended at or after its deadline: it had
// a limit and ran that long. Its context was done by then (Context), so a
// handler that heeds its context returns at its deadline; one that
// ignores it still runs to its end, and has overrun all the same.
func (r Run) Overran() bool { return r.Timeout > 0 && r.Elapsed >= r.Timeout }

// Context returns the context of a handler call that starts at start
// with a time limit of timeout: parent with the deadline start + timeout,
// whose cause (context.Cause) is TaskTimedOut(timeout), or parent itself
// when timeout is 0 or less. The caller must call cancel when the call
// returns.
func Context(parent context.Context, start time.Time, timeout time.Duration) (ctx context.Context, cancel context.CancelFunc) {
	if timeout <= 0 {
		return parent, func() {}
	}
	return context.WithDeadlineCause(parent, start.Add(timeout), TaskTimedOut(timeout))
}

// Of decides the outcome of run r, the attempt-th run of its task, which
// has a budget of maxRetries retries. A run that overran its time limit
// is a transient failure with the error TaskTimedOut (dead-lettered with
// the reason protocol.ReasonTimeout once no retry is left), whatever its
// handler returned: a result that came too late is not recorded, and
// even a permanent error is retried, since an error that came after the
// deadline may be the deadline's doing (a call it cut short, reported as
// bad input). Otherwise a nil error completes the task with
// the value as JSON (EncodeResult; a value that cannot be encoded is a
// permanent failure, and so is one larger than r.MaxResult, with the
// reason protocol.ReasonResultTooLarge), and an error goes to Decide,
// with permanent telling permanent errors apart.
func Of(r Run, permanent func(error) bool, attempt, maxRetries int, tiers []time.Duration) Decision {
	switch {
	case r.Overran():
		d := failure(TaskTimedOut(r.Timeout), false, attempt, maxRetries, tiers)
		if d.Action == DeadLetter {
			d.Reason = protocol.ReasonTimeout
		}
		return d
	case r.Err != nil:
		return failure(r.Err, permanent(r.Err), attempt, maxRetries, tiers)
	}
	raw, err := EncodeResult(r.Value)
	if err != nil {
		return failure(err, true, attempt, maxRetries, tiers)
	}
	if r.MaxResult > 0 && len(raw) > r.MaxResult {
		d := failure(ResultTooLarge(len(raw), r.MaxResult), true, attempt, maxRetries, tiers)
		d.Reason = protocol.ReasonResultTooLarge
		return d
	}
	return Decision{Action: Complete, Result: raw}
}

// failure decides a run that failed with err, permanently or not.
func failure(err error, permanent bool, attempt, maxRetries int, tiers []time.Duration) Decision {
	action, delay := Decide(permanent, attempt, maxRetries, tiers)
	d := Decision{Action: action, Err: err, Delay: delay}
	switch action {
	case Fail:
		d.Reason = protocol.ReasonPermanent
	case DeadLetter:
		d.Reason = protocol.ReasonRetriesExhausted
	}
	return d
}

// Decide is the retry policy: a permanent error fails the task; a
// transient one retries it while attempt <= maxRetries (so a task runs at
// most 1+maxRetries times), then dead-letters it. A retry waits in a delay
// tier: the nth retry in tiers[n-1], every retry past the last tier in the
// last; the returned delay is that tier's. tiers must not be empty.
func Decide(permanent bool, attempt, maxRetries int, tiers []time.Duration) (Action, time.Duration) {
	switch {
	case permanent:
		return Fail, 0
	case attempt <= maxRetries:
		// This run is attempt; the retry is the attempt-th.
		return Retry, tiers[protocol.RetryTier(attempt, len(tiers))]
	default:
		return DeadLetter, 0
	}
}

// EncodeResult returns a handler's value as JSON: a json.RawMessage, or a
// []byte holding valid JSON, as it is; anything else through json.Marshal.
func EncodeResult(v any) (json.RawMessage, error) {
	switch x := v.(type) {
	case nil:
		return json.RawMessage("null"), nil
	case json.RawMessage:
		if len(x) == 0 {
			return json.RawMessage("null"), nil
		}
		if !json.Valid(x) {
			return nil, errors.New("worker: the handler returned a json.RawMessage that is not valid JSON")
		}
		return x, nil
	case []byte:
		if json.Valid(x) {
			return json.RawMessage(x), nil
		}
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("worker: marshal the handler's result of type %T: %w", v, err)
	}
	return raw, nil
}

// The errors of runs that went wrong around the handler. The worker and
// worker/workertest both settle them, so they are written once.

// ResultTooLarge is the permanent error of a run whose result, size bytes
// of JSON, is over the worker's limit of max bytes.
func ResultTooLarge(size, max int) error {
	return fmt.Errorf("worker: the result is %d bytes of JSON, over this worker's limit of %d (worker.Config.MaxResultBytes); "+
		"return a reference to large data instead, or raise the limit", size, max)
}

// HandlerPanicked is the transient error of a run whose handler panicked
// with p.
func HandlerPanicked(p any) error { return fmt.Errorf("worker: handler panicked: %v", p) }

// TaskTimedOut is the transient error of a run that overran its time
// limit timeout (Run.Overran), whatever its handler returned. It wraps
// context.DeadlineExceeded.
func TaskTimedOut(timeout time.Duration) error { return taskTimedOut{timeout} }

type taskTimedOut struct{ timeout time.Duration }

func (e taskTimedOut) Error() string {
	return fmt.Sprintf("worker: task timeout of %s exceeded", e.timeout)
}

func (e taskTimedOut) Unwrap() error { return context.DeadlineExceeded }

// BatchHandlerPanicked is the transient error of every task of a batch
// whose batch handler panicked with p.
func BatchHandlerPanicked(p any) error { return fmt.Errorf("worker: batch handler panicked: %v", p) }

// WrongOutcomeCount is the transient error of every task of a batch whose
// batch handler returned got outcomes for want tasks.
func WrongOutcomeCount(got, want int) error {
	return fmt.Errorf("worker: batch handler returned %d outcomes for %d tasks", got, want)
}

// UnknownType is the error of a task no handler is registered for; such a
// task is dead-lettered with protocol.ReasonUnknownType.
func UnknownType(taskType string) error {
	if taskType == "" {
		return errors.New("worker: the task message has no type property, and handlers are chosen by type")
	}
	return fmt.Errorf("worker: no handler for task type %q on this queue", taskType)
}

// UnknownReducer is the error of a reduce task no reducer is registered
// for; such a task is dead-lettered with protocol.ReasonUnknownType.
func UnknownReducer(taskType string) error {
	if taskType == "" {
		return errors.New("worker: the reduce task message has no type property, and reducers are chosen by type")
	}
	return fmt.Errorf("worker: no reducer for task type %q on this queue", taskType)
}
