// Package outcome decides, in one place, what becomes of one run of a
// task: its result, a retry through a delay tier, or a dead letter. The
// worker settles every run with Of, and worker/workertest runs handlers
// through the same decision without a broker.
package outcome

import (
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
	// Err is why the run failed (every other action).
	Err error
	// Delay is how long a retry waits: its tier's delay (Retry).
	Delay time.Duration
	// Reason is the dead letter's protocol reason (Fail, DeadLetter).
	Reason string
}

// Of decides the outcome of a run that returned value and err, on its
// attempt-th run with a budget of maxRetries retries: a nil err completes
// the task with value as JSON (EncodeResult; a value that cannot be
// encoded is a permanent failure), and a failure goes to Decide, with
// permanent telling permanent errors apart.
func Of(value any, err error, permanent func(error) bool, attempt, maxRetries int, tiers []time.Duration) Decision {
	if err == nil {
		raw, merr := EncodeResult(value)
		if merr == nil {
			return Decision{Action: Complete, Result: raw}
		}
		action, _ := Decide(true, attempt, maxRetries, tiers)
		return Decision{Action: action, Err: merr, Reason: protocol.ReasonPermanent}
	}
	action, delay := Decide(permanent(err), attempt, maxRetries, tiers)
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

// HandlerPanicked is the transient error of a run whose handler panicked
// with p.
func HandlerPanicked(p any) error { return fmt.Errorf("worker: handler panicked: %v", p) }

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
