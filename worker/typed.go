package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
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
