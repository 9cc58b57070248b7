package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"reflect"

	"github.com/warrenhq/warren/protocol"
)

// Typed returns a HandlerFunc that decodes the task's payload into a new
// In with encoding/json and calls h with it; h's Out is the task's result,
// marshalled as a HandlerFunc's result is, and h's error is treated as a
// HandlerFunc's (Permanent to fail the task at once, anything else
// retried).
//
// A payload that does not decode into In fails the task permanently
// without calling h: the returned error is marked with Permanent, names
// In's type and wraps the decoding error (errors.As finds a
// *json.UnmarshalTypeError or *json.SyntaxError), since no retry makes a
// payload decode. Decoding is json.Unmarshal's: fields In does not have
// are ignored, and a null payload leaves In's zero value. Typed panics if
// h is nil.
func Typed[In, Out any](h func(ctx context.Context, t Task, in In) (Out, error)) HandlerFunc {
	if h == nil {
		panic("worker: Typed with a nil handler")
	}
	return func(ctx context.Context, t Task) (any, error) {
		var in In
		if err := json.Unmarshal(t.Payload, &in); err != nil {
			// reflect, not %T: %T of a nil interface In says only <nil>.
			return nil, Permanent(fmt.Errorf("worker: the task payload does not decode into %s: %w", reflect.TypeFor[In](), err))
		}
		return h(ctx, t, in)
	}
}

// TypedOutcome is a map task's outcome with its result decoded, as a
// TypedReducer's reducer reads it.
type TypedOutcome[R any] struct {
	// TaskID is the task's id, 1..N.
	TaskID int64
	// State is protocol.StatusCompleted or protocol.StatusFailed.
	State string
	// Result is the task's result decoded into an R; R's zero value when
	// the task failed.
	Result R
	// Error is the task's failure, when it failed.
	Error string
}

// Completed reports whether the task completed.
func (o TypedOutcome[R]) Completed() bool { return o.State == protocol.StatusCompleted }

// TypedReducer returns a ReducerFunc that decodes the reduce payload into
// a new P and each completed task's result into a new R with
// encoding/json, and calls fn with them; fn's O is the job's result and
// its error is treated as a ReducerFunc's (Permanent to fail the job at
// once, anything else retried).
//
// A payload that does not decode into P fails the reduce task
// permanently without calling fn, as Typed does. A result that does not
// decode into R is yielded as an error marked with Permanent, naming R's
// type and the task, which ends the iteration: return it and the job
// fails, since no retry makes it decode. Errors of the outcomes RPC are
// yielded as a ReducerFunc's outcomes yield them. TypedReducer panics if
// fn is nil.
func TypedReducer[P, R, O any](fn func(ctx context.Context, job ReduceJob, payload P, outcomes iter.Seq2[TypedOutcome[R], error]) (O, error)) ReducerFunc {
	if fn == nil {
		panic("worker: TypedReducer with a nil reducer")
	}
	return func(ctx context.Context, job ReduceJob, outcomes iter.Seq2[TaskOutcome, error]) (any, error) {
		var payload P
		if err := json.Unmarshal(orNull(job.Payload), &payload); err != nil {
			return nil, Permanent(fmt.Errorf("worker: the reduce payload does not decode into %s: %w", reflect.TypeFor[P](), err))
		}
		return fn(ctx, job, payload, typedOutcomes[R](outcomes))
	}
}

// typedOutcomes decodes the results of outcomes into Rs.
func typedOutcomes[R any](outcomes iter.Seq2[TaskOutcome, error]) iter.Seq2[TypedOutcome[R], error] {
	return func(yield func(TypedOutcome[R], error) bool) {
		for o, err := range outcomes {
			if err != nil {
				yield(TypedOutcome[R]{}, err)
				return
			}
			t := TypedOutcome[R]{TaskID: o.TaskID, State: o.State, Error: o.Error}
			if o.Completed() {
				if err := json.Unmarshal(orNull(o.Result), &t.Result); err != nil {
					yield(TypedOutcome[R]{}, Permanent(fmt.Errorf("worker: the result of task %d does not decode into %s: %w", o.TaskID, reflect.TypeFor[R](), err)))
					return
				}
			}
			if !yield(t, nil) {
				return
			}
		}
	}
}

// orNull returns raw, or JSON null when it is empty.
func orNull(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}
