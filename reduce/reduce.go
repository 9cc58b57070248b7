package reduce

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Reducer folds a job's task results, fed in task id order, into one JSON
// document, streaming (the package documentation says what it is given
// and what it promises). A Reducer serves one job and one goroutine; after
// Add returns an error it is discarded.
type Reducer interface {
	// Add is called once per task in task id order. failed is true for a
	// task that failed (result is then nil). result is only valid during
	// the call, so the caller may reuse its buffer: a Reducer that needs
	// the bytes later must copy them. An error should say why the result
	// was refused; Reduce makes it a *Error naming the task when it is
	// not one already.
	Add(taskID int64, failed bool, result json.RawMessage) error
	// Result returns the reduced document, valid JSON. It is called once,
	// after the last Add, and not at all when an Add or the scan failed.
	Result() ([]byte, error)
}

// Factory makes a new, empty Reducer for one job. It is called once per
// reduction, possibly from several goroutines at once, and must not
// return nil.
type Factory func() Reducer

// Default is the name of the reducer of a job that names none.
const Default = "collect"

// ErrUnknownReducer is wrapped by Reduce's error when no reducer is
// registered under the name it was given.
var ErrUnknownReducer = errors.New("unknown reducer")

// Error is a reducer refusing one task's result. Built-in reducers
// return it from Add, and Reduce wraps every error from Add in one, so
// errors.As finds the task whichever reducer ran.
type Error struct {
	// TaskID is the task whose result was refused.
	TaskID int64
	// Err says why.
	Err error
}

// Error names the task and the reason.
func (e *Error) Error() string {
	return fmt.Sprintf("task %d: %v", e.TaskID, e.Err)
}

// Unwrap returns the reason, for errors.Is and errors.As.
func (e *Error) Unwrap() error { return e.Err }

// ScanFunc feeds a job's task results to fn, one call per task in
// increasing task id order, and returns fn's first error, or its own. It
// should stop at fn's first error; Reduce copes with one that does not.
// fn takes Reducer.Add's arguments in Add's order, which is also the
// order of store.Store's ScanResults (with failed for a state other than
// completed).
type ScanFunc func(fn func(taskID int64, failed bool, result json.RawMessage) error) error

// Reduce runs the reducer registered under name over the results scan
// feeds it and returns the reduced document, which is valid JSON. The
// reducer sees a failed task with a nil result, whatever scan passed.
//
// Errors: an unregistered name wraps ErrUnknownReducer, and scan is not
// called; a refused result is a *Error naming the task; task ids that do
// not increase stop the scan; an error of scan's own is returned wrapped.
// Every error names the reducer.
//
// The package documentation describes the built-in reducers.
func (reg *Registry) Reduce(name string, scan ScanFunc) ([]byte, error) {
	newReducer, ok := reg.Lookup(name)
	if !ok {
		return nil, fmt.Errorf("reduce %q: %w", name, ErrUnknownReducer)
	}
	r := newReducer()
	if r == nil {
		return nil, fmt.Errorf("reduce %q: the Factory returned a nil Reducer", name)
	}
	out, err := run(r, scan)
	if err != nil {
		return nil, fmt.Errorf("reduce %q: %w", name, err)
	}
	return out, nil
}

// run feeds r the results scan yields, in increasing task id order, and
// returns r's result once it is known to be JSON.
func run(r Reducer, scan ScanFunc) ([]byte, error) {
	var (
		lastID  int64
		started bool
		stopErr error // why run stopped the scan, as opposed to scan failing
	)
	scanErr := scan(func(taskID int64, failed bool, result json.RawMessage) error {
		if stopErr != nil { // a scan that ignored the error: the reducer is spent
			return stopErr
		}
		if started && taskID <= lastID {
			stopErr = fmt.Errorf("task %d came after task %d: results must arrive in increasing task id order", taskID, lastID)
			return stopErr
		}
		started, lastID = true, taskID
		if failed {
			result = nil
		}
		if err := r.Add(taskID, failed, result); err != nil {
			stopErr = errorFor(taskID, err)
			return stopErr
		}
		return nil
	})
	switch {
	case stopErr != nil:
		return nil, stopErr
	case scanErr != nil:
		return nil, fmt.Errorf("scanning results: %w", scanErr)
	}

	out, err := r.Result()
	if err != nil {
		return nil, err
	}
	if _, valid := r.(reducerOfValidJSON); !valid && !json.Valid(out) {
		return nil, fmt.Errorf("the reducer's result is not valid JSON: %.40q", out)
	}
	return out, nil
}

// reducerOfValidJSON is a built-in reducer: its Result is valid JSON by
// construction, so Reduce need not scan it again. Only this package can
// implement it.
type reducerOfValidJSON interface{ resultIsValidJSON() }

// errorFor makes err a *Error for taskID unless it already is one.
func errorFor(taskID int64, err error) error {
	if _, ok := errors.AsType[*Error](err); ok {
		return err
	}
	return &Error{TaskID: taskID, Err: err}
}

// refuseResult is the error a built-in reducer returns for a task's result.
func refuseResult(taskID int64, format string, args ...any) error {
	return &Error{TaskID: taskID, Err: fmt.Errorf(format, args...)}
}
