package reduce_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/reduce"
)

// builtins holds the built-in reducers; tests that register use their own
// registry.
var builtins = reduce.NewRegistry()

// failedTask marks a failed task among scanOf's results.
const failedTask = "<failed>"

// scanOf scans results as tasks 1..len(results), in order.
func scanOf(results ...string) reduce.ScanFunc {
	return func(fn func(int64, bool, json.RawMessage) error) error {
		for i, r := range results {
			var err error
			if r == failedTask {
				err = fn(int64(i+1), true, nil)
			} else {
				err = fn(int64(i+1), false, json.RawMessage(r))
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
}

// reduceCase is one run of a reducer: either the document it must produce
// or the error it must return, and the task that error must name.
type reduceCase struct {
	name    string
	results []string
	want    string
	wantErr string
	errTask int64
}

func runReduceCases(t *testing.T, reducer string, cases []reduceCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, err := builtins.Reduce(reducer, scanOf(tc.results...))
			if tc.wantErr == "" {
				require.NoError(t, err)
				require.Equal(t, tc.want, string(out))
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
			require.ErrorContains(t, err, fmt.Sprintf("task %d:", tc.errTask))
			re, ok := errors.AsType[*reduce.Error](err)
			require.True(t, ok, "want a *reduce.Error, got %T: %v", err, err)
			require.Equal(t, tc.errTask, re.TaskID)
			require.Nil(t, out)
		})
	}
}

// The reducers themselves name the task, not only Reduce.
func TestReducerAddNamesTheTask(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"collect", "sum", "concat", "merge"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			newReducer, ok := builtins.Lookup(name)
			require.True(t, ok)
			err := newReducer().Add(42, false, json.RawMessage(`{"a":`))
			require.EqualError(t, err, `task 42: `+errors.Unwrap(err).Error())
			re, ok := errors.AsType[*reduce.Error](err)
			require.True(t, ok)
			require.Equal(t, int64(42), re.TaskID)
		})
	}
}

func TestReduceUnknownReducer(t *testing.T) {
	t.Parallel()
	scanned := false
	out, err := builtins.Reduce("no-such-reducer", func(func(int64, bool, json.RawMessage) error) error {
		scanned = true
		return nil
	})
	require.ErrorIs(t, err, reduce.ErrUnknownReducer)
	require.ErrorContains(t, err, `"no-such-reducer"`)
	require.Nil(t, out)
	require.False(t, scanned, "scanned results for an unknown reducer")

	_, ok := builtins.Lookup("no-such-reducer")
	require.False(t, ok)
}

func TestReduceRejectsTasksOutOfOrder(t *testing.T) {
	t.Parallel()
	for _, ids := range [][]int64{{1, 3, 2}, {1, 1}} {
		_, err := builtins.Reduce("collect", func(fn func(int64, bool, json.RawMessage) error) error {
			for _, id := range ids {
				if err := fn(id, false, json.RawMessage(`1`)); err != nil {
					return err
				}
			}
			return nil
		})
		require.ErrorContains(t, err, "increasing task id order", "ids %v", ids)
	}
}

func TestReduceStopsAScanThatIgnoresErrors(t *testing.T) {
	t.Parallel()
	var errs []error
	_, err := builtins.Reduce("sum", func(fn func(int64, bool, json.RawMessage) error) error {
		for id, result := range []string{`1`, `"x"`, `"y"`} {
			errs = append(errs, fn(int64(id+1), false, json.RawMessage(result)))
		}
		return nil
	})
	require.ErrorContains(t, err, "task 2:")
	require.NoError(t, errs[0])
	require.Same(t, errs[1], errs[2], "task 3 reached the spent reducer")
}

func TestReduceWrapsScanErrors(t *testing.T) {
	t.Parallel()
	errStore := errors.New("store is down")
	_, err := builtins.Reduce("sum", func(fn func(int64, bool, json.RawMessage) error) error {
		if err := fn(1, false, json.RawMessage(`1`)); err != nil {
			return err
		}
		return errStore
	})
	require.ErrorIs(t, err, errStore)
	require.ErrorContains(t, err, `reduce "sum": scanning results`)
}

func TestReduceHidesFailedTasksResults(t *testing.T) {
	t.Parallel()
	// A failed task's stored bytes (an error payload, say) never reach
	// the reducer.
	out, err := builtins.Reduce("collect", func(fn func(int64, bool, json.RawMessage) error) error {
		return fn(1, true, json.RawMessage(`{"error":"boom"}`))
	})
	require.NoError(t, err)
	require.Equal(t, `[null]`, string(out))
}

// funcReducer adapts functions to a custom Reducer for error tests.
type funcReducer struct {
	add    func(taskID int64) error
	result func() ([]byte, error)
}

func (r funcReducer) Add(taskID int64, _ bool, _ json.RawMessage) error { return r.add(taskID) }
func (r funcReducer) Result() ([]byte, error)                           { return r.result() }

func TestReduceCustomReducerErrors(t *testing.T) {
	t.Parallel()
	errBad := errors.New("bad result")
	ok := func(int64) error { return nil }
	okResult := func() ([]byte, error) { return []byte(`1`), nil }
	// registryWith holds f as the reducer "custom".
	registryWith := func(t *testing.T, f reduce.Factory) *reduce.Registry {
		reg := reduce.NewRegistry()
		require.NoError(t, reg.Register("custom", f))
		return reg
	}
	of := func(r reduce.Reducer) reduce.Factory { return func() reduce.Reducer { return r } }

	t.Run("an Add error gets the task id", func(t *testing.T) {
		t.Parallel()
		reg := registryWith(t, of(funcReducer{add: func(id int64) error {
			if id == 2 {
				return errBad
			}
			return nil
		}, result: okResult}))
		_, err := reg.Reduce("custom", scanOf(`1`, `2`, `3`))
		require.ErrorIs(t, err, errBad)
		re, isReduceErr := errors.AsType[*reduce.Error](err)
		require.True(t, isReduceErr)
		require.Equal(t, int64(2), re.TaskID)
		require.EqualError(t, err, `reduce "custom": task 2: bad result`)
	})
	t.Run("a Result error", func(t *testing.T) {
		t.Parallel()
		reg := registryWith(t, of(funcReducer{add: ok, result: func() ([]byte, error) { return nil, errBad }}))
		_, err := reg.Reduce("custom", scanOf(`1`))
		require.ErrorIs(t, err, errBad)
	})
	t.Run("a result that is not JSON", func(t *testing.T) {
		t.Parallel()
		reg := registryWith(t, of(funcReducer{add: ok, result: func() ([]byte, error) { return []byte(`{`), nil }}))
		_, err := reg.Reduce("custom", scanOf(`1`))
		require.ErrorContains(t, err, "not valid JSON")
	})
	t.Run("a nil Reducer", func(t *testing.T) {
		t.Parallel()
		reg := registryWith(t, func() reduce.Reducer { return nil })
		_, err := reg.Reduce("custom", scanOf(`1`))
		require.ErrorContains(t, err, "nil Reducer")
	})
}

// benchmarkReduce reduces tasks results made by result, per iteration.
func benchmarkReduce(b *testing.B, name string, result func(i int) string) {
	const tasks = 10_000
	results := make([]json.RawMessage, tasks)
	for i := range results {
		results[i] = json.RawMessage(result(i))
	}
	scan := func(fn func(int64, bool, json.RawMessage) error) error {
		for i, r := range results {
			if err := fn(int64(i+1), false, r); err != nil {
				return err
			}
		}
		return nil
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := builtins.Reduce(name, scan); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*tasks), "ns/task")
}
