package reduce_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/reduce"
)

// builtins holds the built-in reducers; tests that register use their own
// registry.
var builtins = reduce.NewRegistry()

// reduceFailed marks a failed task among reduceScanOf's results.
const reduceFailed = "<failed>"

// reduceScanOf scans results as tasks 1..len(results), in order.
func reduceScanOf(results ...string) reduce.ScanFunc {
	return func(fn func(int64, bool, json.RawMessage) error) error {
		for i, r := range results {
			var err error
			if r == reduceFailed {
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
			out, err := builtins.Reduce(reducer, reduceScanOf(tc.results...))
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

func TestReduceCollect(t *testing.T) {
	t.Parallel()
	runReduceCases(t, "collect", []reduceCase{
		{name: "compacts each result in task order",
			results: []string{`{"a": [1, 2]}`, ` "x y" `, "\n3\n", `true`, `null`},
			want:    `[{"a":[1,2]},"x y",3,true,null]`},
		{name: "null where a task failed",
			results: []string{reduceFailed, `1`, reduceFailed, `2`, reduceFailed},
			want:    `[null,1,null,2,null]`},
		{name: "every task failed", results: []string{reduceFailed, reduceFailed}, want: `[null,null]`},
		{name: "invalid UTF-8 becomes U+FFFD", results: []string{"\"a\xffb\""}, want: "[\"a\uFFFDb\"]"},
		{name: "no tasks", want: `[]`},
		{name: "malformed result", results: []string{`1`, `{"a":`, `3`},
			wantErr: "not valid JSON", errTask: 2},
		{name: "two values in one result", results: []string{`1 2`},
			wantErr: "not valid JSON", errTask: 1},
		{name: "empty result of a completed task", results: []string{`1`, `2`, ``},
			wantErr: "empty", errTask: 3},
	})
}

func TestReduceSum(t *testing.T) {
	t.Parallel()
	runReduceCases(t, "sum", []reduceCase{
		{name: "integers", results: []string{`1`, ` 2 `, `-10`, `40`}, want: `33`},
		{name: "a fraction makes a float", results: []string{`1`, `2.5`}, want: `3.5`},
		{name: "an exponent makes a float", results: []string{`1`, `1e3`}, want: `1001`},
		{name: "huge float sum", results: []string{`1e300`, `1e300`}, want: `2e+300`},
		{name: "integers beyond int64 with a float",
			results: []string{`9223372036854775807`, `9223372036854775807`, `0.5`},
			want:    `18446744073709552000`},
		{name: "failed tasks are skipped", results: []string{reduceFailed, `5`, reduceFailed, `6`}, want: `11`},
		{name: "every task failed", results: []string{reduceFailed}, want: `0`},
		{name: "no tasks", want: `0`},
		{name: "string result", results: []string{`1`, `"2"`}, wantErr: "got a JSON string", errTask: 2},
		{name: "null result", results: []string{`null`}, wantErr: "got a JSON null", errTask: 1},
		{name: "object result", results: []string{`1`, `2`, `{"n":3}`}, wantErr: "got a JSON object", errTask: 3},
		{name: "malformed result", results: []string{`1`, `12x`}, wantErr: "not valid JSON", errTask: 2},
		{name: "empty result", results: []string{``}, wantErr: "empty", errTask: 1},
		{name: "number beyond float64", results: []string{`1.5`, `1e400`}, wantErr: "out of float64 range", errTask: 2},
		{name: "float sum overflows", results: []string{`1e308`, `1e308`}, wantErr: "overflows float64", errTask: 2},
	})
}

func TestReduceConcat(t *testing.T) {
	t.Parallel()
	runReduceCases(t, "concat", []reduceCase{
		{name: "arrays", results: []string{`[1, 2]`, `[]`, `[{"a": 3}]`, `["x"]`}, want: `[1,2,{"a":3},"x"]`},
		{name: "strings", results: []string{`"ab"`, `""`, `"c\u0064"`, `"<&>"`}, want: `"abcd<&>"`},
		{name: "escapes stay escaped", results: []string{`"a\"b"`, `"\n"`}, want: `"a\"b\n"`},
		{name: "failed tasks and nulls are skipped",
			results: []string{reduceFailed, `null`, `[1]`, reduceFailed, `null`, `[2]`}, want: `[1,2]`},
		{name: "invalid UTF-8 becomes U+FFFD", results: []string{"[\"a\xffb\"]", "[\"\xc0\"]"}, want: "[\"a\uFFFDb\",\"\uFFFD\"]"},
		{name: "only empty arrays", results: []string{`[]`, `[]`}, want: `[]`},
		{name: "only nulls", results: []string{`null`, reduceFailed}, want: `[]`},
		{name: "no tasks", want: `[]`},
		{name: "string after arrays", results: []string{`[1]`, `null`, `"x"`},
			wantErr: "got a JSON string after earlier results that were JSON arrays", errTask: 3},
		{name: "array after strings", results: []string{`"x"`, `[1]`},
			wantErr: "got a JSON array after earlier results that were JSON strings", errTask: 2},
		{name: "number result", results: []string{`[1]`, `2`}, wantErr: "want a JSON array or string, got a JSON number", errTask: 2},
		{name: "malformed result", results: []string{`[1`}, wantErr: "not valid JSON", errTask: 1},
		{name: "empty result", results: []string{`[1]`, ``}, wantErr: "empty", errTask: 2},
	})
}

func TestReduceMerge(t *testing.T) {
	t.Parallel()
	runReduceCases(t, "merge", []reduceCase{
		{name: "word counts, keys sorted",
			results: []string{`{"the": 2, "fox": 1}`, `{}`, `{"the": 1, "dog": 3}`},
			want:    `{"dog":3,"fox":1,"the":3}`},
		{name: "a fraction makes only its key a float",
			results: []string{`{"a": 1, "b": 1}`, `{"a": 0.25, "b": 2}`},
			want:    `{"a":1.25,"b":3}`},
		{name: "escaped keys decode first", results: []string{`{"\u0061": 1}`, `{"a": 2}`}, want: `{"a":3}`},
		{name: "escapes, spacing, signs and exponents",
			results: []string{`{"a\"b": 1, "\u00e9": 2}`, ` { "é" : -5 , "x":2e1 } `},
			want:    `{"a\"b":1,"x":20,"é":-3}`},
		{name: "a key repeated in one result counts each time", results: []string{`{"a": 1, "a": 2}`}, want: `{"a":3}`},
		{name: "failed tasks and nulls are skipped",
			results: []string{reduceFailed, `{"x": 1}`, `null`, `{"x": 1}`}, want: `{"x":2}`},
		{name: "every task failed", results: []string{reduceFailed}, want: `{}`},
		{name: "no tasks", want: `{}`},
		{name: "array result", results: []string{`{"a": 1}`, `[1]`}, wantErr: "want a JSON object of numbers, got a JSON array", errTask: 2},
		{name: "string value", results: []string{`{"a": "1"}`}, wantErr: `key "a": want a JSON number, got a JSON string`, errTask: 1},
		{name: "nested object value", results: []string{`{"a": 1}`, `{"a": {"b": 1}}`}, wantErr: `key "a": want a JSON number, got a JSON object`, errTask: 2},
		{name: "boolean value", results: []string{`{"a": 1, "b": true}`}, wantErr: `key "b": want a JSON number, got a JSON boolean`, errTask: 1},
		{name: "malformed object", results: []string{`{"a": 1,}`}, wantErr: "not valid JSON", errTask: 1},
		{name: "malformed scalar", results: []string{`nul`}, wantErr: "not valid JSON", errTask: 1},
		{name: "empty result", results: []string{` `}, wantErr: "empty", errTask: 1},
	})
}

func TestReduceNone(t *testing.T) {
	t.Parallel()
	runReduceCases(t, "none", []reduceCase{
		{name: "ignores results", results: []string{`1`, reduceFailed, `{"a": "b"}`}, want: `null`},
		{name: "ignores malformed results", results: []string{`{`}, want: `null`},
		{name: "no tasks", want: `null`},
	})
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

// reduceIntScan scans n tasks whose results are the integer literals lit
// appends, written into one reused buffer so that nothing is kept for the
// reducer; want is their exact sum.
func reduceIntScan(n int, lit func(b []byte, i int) []byte) (scan reduce.ScanFunc, want *big.Int) {
	want = new(big.Int)
	var v big.Int
	for i := range n {
		_, ok := v.SetString(string(lit(nil, i)), 10)
		if !ok {
			panic(fmt.Sprintf("bad literal %q", lit(nil, i)))
		}
		want.Add(want, &v)
	}
	scan = func(fn func(int64, bool, json.RawMessage) error) error {
		buf := make([]byte, 0, 64)
		for i := range n {
			buf = lit(buf[:0], i)
			if err := fn(int64(i+1), false, buf); err != nil {
				return err
			}
		}
		return nil
	}
	return scan, want
}

func TestReduceSumExactNearInt64Limits(t *testing.T) {
	t.Parallel()
	const n = 1_000_000
	near := func(limit int64, i int) int64 {
		if limit > 0 {
			return limit - int64(i%1000)
		}
		return limit + int64(i%1000)
	}
	cases := []struct {
		name string
		lit  func(b []byte, i int) []byte
	}{
		{"all near MaxInt64", func(b []byte, i int) []byte {
			return strconv.AppendInt(b, near(math.MaxInt64, i), 10)
		}},
		{"all near MinInt64", func(b []byte, i int) []byte {
			return strconv.AppendInt(b, near(math.MinInt64, i), 10)
		}},
		// The running total overflows far upwards, then comes back into
		// int64 range: the output must be that exact int64, which a lossy
		// float64 fallback would miss.
		{"overflows and returns", func(b []byte, i int) []byte {
			if i < n/2 {
				return strconv.AppendInt(b, near(math.MaxInt64, i), 10)
			}
			return strconv.AppendInt(b, near(math.MinInt64, i), 10)
		}},
		{"literals beyond int64", func(b []byte, i int) []byte {
			switch i % 3 {
			case 0:
				return append(b, "18446744073709551615"...)
			case 1:
				return append(b, "-9223372036854775809"...)
			}
			return strconv.AppendInt(b, near(math.MaxInt64, i), 10)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			scan, want := reduceIntScan(n, tc.lit)
			out, err := builtins.Reduce("sum", scan)
			require.NoError(t, err)
			require.Equal(t, want.String(), string(out))
		})
	}
}

func TestReduceMergeExactNearInt64Limits(t *testing.T) {
	t.Parallel()
	const objects = 250_000 // four keys each: a million values
	var wantMax, wantMin, wantSwing big.Int
	buf := make([]byte, 0, 128)
	scan := func(fn func(int64, bool, json.RawMessage) error) error {
		for i := range objects {
			hi := int64(math.MaxInt64 - i%7)
			lo := int64(math.MinInt64 + i%5)
			swing := hi
			if i >= objects/2 {
				swing = lo
			}
			wantMax.Add(&wantMax, big.NewInt(hi))
			wantMin.Add(&wantMin, big.NewInt(lo))
			wantSwing.Add(&wantSwing, big.NewInt(swing))
			buf = fmt.Appendf(buf[:0], `{"max": %d, "min": %d, "swing": %d, "one": 1}`, hi, lo, swing)
			if err := fn(int64(i+1), false, buf); err != nil {
				return err
			}
		}
		return nil
	}
	out, err := builtins.Reduce("merge", scan)
	require.NoError(t, err)
	require.True(t, wantSwing.IsInt64(), "the swing key must come back into int64 range")
	want := fmt.Sprintf(`{"max":%s,"min":%s,"one":%d,"swing":%s}`, &wantMax, &wantMin, objects, &wantSwing)
	require.Equal(t, want, string(out))
}

// TestReduceCollectMillionResults is not parallel: it reads the heap size,
// which is process-wide, so it must run while no other test allocates.
func TestReduceCollectMillionResults(t *testing.T) {
	const (
		n       = 1_000_000
		padding = "                                        " // compacted away
	)
	failed := func(id int64) bool { return id%1000 == 0 }

	var before, during runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	// One buffer for every result: a reducer that kept results without
	// copying them would produce garbage.
	buf := make([]byte, 0, 128)
	scan := func(fn func(int64, bool, json.RawMessage) error) error {
		for id := int64(1); id <= n; id++ {
			if id == n {
				runtime.GC()
				runtime.ReadMemStats(&during)
			}
			buf = append(buf[:0], `{"i": `...)
			buf = strconv.AppendInt(buf, id, 10)
			buf = append(append(buf, padding...), '}')
			if err := fn(id, failed(id), buf); err != nil {
				return err
			}
		}
		return nil
	}
	out, err := builtins.Reduce("collect", scan)
	require.NoError(t, err)

	// Inputs add up to ~55 MB and the output to ~12 MB: holding more than
	// a growing buffer's worth of output means the reducer kept inputs.
	held := int64(during.HeapAlloc) - int64(before.HeapAlloc)
	require.Less(t, held, int64(3*len(out)+1<<20), "heap grew by %d bytes for a %d-byte output", held, len(out))

	want := make([]byte, 0, len(out))
	want = append(want, '[')
	for id := int64(1); id <= n; id++ {
		if id > 1 {
			want = append(want, ',')
		}
		if failed(id) {
			want = append(want, "null"...)
			continue
		}
		want = strconv.AppendInt(append(want, `{"i":`...), id, 10)
		want = append(want, '}')
	}
	want = append(want, ']')
	requireSameBytes(t, want, out)
}

// requireSameBytes compares large outputs, showing where they part.
func requireSameBytes(t *testing.T, want, got []byte) {
	t.Helper()
	if bytes.Equal(want, got) {
		return
	}
	at := 0
	for at < len(want) && at < len(got) && want[at] == got[at] {
		at++
	}
	from := max(0, at-40)
	t.Fatalf("outputs of %d (want) and %d (got) bytes part at byte %d:\nwant ...%s\ngot  ...%s",
		len(want), len(got), at, want[from:min(len(want), at+40)], got[from:min(len(got), at+40)])
}

// reduceCounter is a custom reducer: it counts completed and failed tasks.
type reduceCounter struct{ completed, failed int }

func (c *reduceCounter) Add(_ int64, failed bool, _ json.RawMessage) error {
	if failed {
		c.failed++
	} else {
		c.completed++
	}
	return nil
}

func (c *reduceCounter) Result() ([]byte, error) {
	return fmt.Appendf(nil, `{"completed":%d,"failed":%d}`, c.completed, c.failed), nil
}

// newCounter is the Factory of reduceCounter.
func newCounter() reduce.Reducer { return &reduceCounter{} }

func TestRegister(t *testing.T) {
	t.Parallel()
	reg := reduce.NewRegistry()
	require.NoError(t, reg.Register("count", newCounter))

	_, ok := reg.Lookup("count")
	require.True(t, ok)
	names := reg.Names()
	require.Contains(t, names, "count")
	require.True(t, slices.IsSorted(names), "names not sorted: %v", names)

	out, err := reg.Reduce("count", reduceScanOf(`1`, reduceFailed, `3`))
	require.NoError(t, err)
	require.JSONEq(t, `{"completed":2,"failed":1}`, string(out))

	// Each job gets a fresh reducer.
	out, err = reg.Reduce("count", reduceScanOf(`1`))
	require.NoError(t, err)
	require.JSONEq(t, `{"completed":1,"failed":0}`, string(out))
}

func TestRegisterErrors(t *testing.T) {
	t.Parallel()
	reg := reduce.NewRegistry()
	require.NoError(t, reg.Register("dup", newCounter))
	before := reg.Names()

	require.ErrorContains(t, reg.Register("dup", newCounter), `Register("dup"): a reducer of that name is already registered`, "duplicate")
	require.ErrorContains(t, reg.Register("collect", newCounter), `Register("collect"): a reducer of that name is already registered`, "duplicate of a built-in")
	require.ErrorContains(t, reg.Register("", newCounter), "the reducer name is empty", "empty name")
	require.ErrorContains(t, reg.Register("nil", nil), `Register("nil"): the Factory is nil`, "nil func")

	require.Equal(t, before, reg.Names(), "a refused registration changed the registry")
	out, err := reg.Reduce("collect", reduceScanOf(`1`))
	require.NoError(t, err)
	require.Equal(t, `[1]`, string(out), "the built-in was replaced")
}

func TestRegisterConcurrently(t *testing.T) {
	t.Parallel()
	reg := reduce.NewRegistry()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			name := fmt.Sprintf("concurrent-%d", i)
			require.NoError(t, reg.Register(name, newCounter))
			_, ok := reg.Lookup(name)
			require.True(t, ok)
			require.Contains(t, reg.Names(), name)
			_, err := reg.Reduce(name, reduceScanOf(`1`))
			require.NoError(t, err)
		})
	}
	wg.Wait()
	require.Len(t, reg.Names(), 5+8)
}

func TestNamesHasBuiltins(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"collect", "concat", "merge", "none", "sum"}, reduce.NewRegistry().Names())
}

// Registries share nothing: a server's custom reducers are its own.
func TestRegistriesAreIndependent(t *testing.T) {
	t.Parallel()
	one, other := reduce.NewRegistry(), reduce.NewRegistry()
	require.NoError(t, one.Register("count", newCounter))

	_, ok := other.Lookup("count")
	require.False(t, ok, "a reducer registered in one registry is seen by another")
	require.NoError(t, other.Register("count", newCounter), "the name is taken in another registry")
}

func TestZeroRegistryHoldsNothing(t *testing.T) {
	t.Parallel()
	var reg reduce.Registry
	require.Empty(t, reg.Names())
	_, err := reg.Reduce(reduce.Default, reduceScanOf(`1`))
	require.ErrorIs(t, err, reduce.ErrUnknownReducer)

	require.NoError(t, reg.Register("count", newCounter))
	require.Equal(t, []string{"count"}, reg.Names())
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

// reduceFunc adapts functions to a custom Reducer for error tests.
type reduceFunc struct {
	add    func(taskID int64) error
	result func() ([]byte, error)
}

func (r reduceFunc) Add(taskID int64, _ bool, _ json.RawMessage) error { return r.add(taskID) }
func (r reduceFunc) Result() ([]byte, error)                           { return r.result() }

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
		reg := registryWith(t, of(reduceFunc{add: func(id int64) error {
			if id == 2 {
				return errBad
			}
			return nil
		}, result: okResult}))
		_, err := reg.Reduce("custom", reduceScanOf(`1`, `2`, `3`))
		require.ErrorIs(t, err, errBad)
		re, isReduceErr := errors.AsType[*reduce.Error](err)
		require.True(t, isReduceErr)
		require.Equal(t, int64(2), re.TaskID)
		require.EqualError(t, err, `reduce "custom": task 2: bad result`)
	})
	t.Run("a Result error", func(t *testing.T) {
		t.Parallel()
		reg := registryWith(t, of(reduceFunc{add: ok, result: func() ([]byte, error) { return nil, errBad }}))
		_, err := reg.Reduce("custom", reduceScanOf(`1`))
		require.ErrorIs(t, err, errBad)
	})
	t.Run("a result that is not JSON", func(t *testing.T) {
		t.Parallel()
		reg := registryWith(t, of(reduceFunc{add: ok, result: func() ([]byte, error) { return []byte(`{`), nil }}))
		_, err := reg.Reduce("custom", reduceScanOf(`1`))
		require.ErrorContains(t, err, "not valid JSON")
	})
	t.Run("a nil Reducer", func(t *testing.T) {
		t.Parallel()
		reg := registryWith(t, func() reduce.Reducer { return nil })
		_, err := reg.Reduce("custom", reduceScanOf(`1`))
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

func BenchmarkReduceCollect(b *testing.B) {
	benchmarkReduce(b, "collect", func(i int) string {
		return fmt.Sprintf(`{"key": "thumbs/%d.jpg", "width": 320, "ok": true}`, i)
	})
}

func BenchmarkReduceSum(b *testing.B) {
	benchmarkReduce(b, "sum", func(i int) string { return strconv.Itoa(i * 7919) })
}

func BenchmarkReduceConcat(b *testing.B) {
	benchmarkReduce(b, "concat", func(i int) string { return fmt.Sprintf(`[%d, "item-%d"]`, i, i) })
}

func BenchmarkReduceMerge(b *testing.B) {
	// Word counts: eight words a task from a vocabulary of 1,000.
	benchmarkReduce(b, "merge", func(i int) string {
		words := make([]string, 8)
		for j := range words {
			words[j] = fmt.Sprintf(`"w%d": %d`, (i*31+j*97)%1000, j+1)
		}
		return "{" + strings.Join(words, ", ") + "}"
	})
}

// FuzzReduceMerge checks merge's own object walker against encoding/json on
// one result: the same verdict, the same keys and, for integers, the same
// sums.
func FuzzReduceMerge(f *testing.F) {
	for _, seed := range []string{
		`{}`, `null`, ` { "a" : 1 , "b":-2e3,"a":3 } `, `{"a\"b": 1, "\u00e9": 2}`, `{"a": 1.5e-7}`,
		`{"a": "1"}`, `{"a": [1]}`, `{"a": {"b": 1}}`, `{"a": true}`, `{"a": null}`, `{"a":1,}`,
		`{"a":99999999999999999999999}`, "{\"\xff\": 1}", `[{"a":1}]`, `{"a":1}{}`, `{`, ``,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, result string) {
		want, wantOK := reduceMergeReference([]byte(result))
		out, err := builtins.Reduce("merge", reduceScanOf(result))
		if !wantOK {
			require.Error(t, err)
			re, ok := errors.AsType[*reduce.Error](err)
			require.True(t, ok, "%T: %v", err, err)
			require.Equal(t, int64(1), re.TaskID)
			return
		}
		require.NoError(t, err)
		var got map[string]json.Number
		dec := json.NewDecoder(bytes.NewReader(out))
		dec.UseNumber()
		require.NoError(t, dec.Decode(&got))
		require.Len(t, got, len(want))
		for key, sum := range want {
			require.Contains(t, got, key)
			if sum != nil {
				require.Equal(t, sum.String(), got[key].String(), "key %q", key)
			}
		}
	})
}

// reduceMergeReference merges one result with encoding/json: the integer
// sum of each key (nil for a key with a non-integer value), and whether
// merge must accept the result.
func reduceMergeReference(result []byte) (map[string]*big.Int, bool) {
	sums := map[string]*big.Int{}
	if !json.Valid(result) {
		return nil, false
	}
	if string(bytes.TrimSpace(result)) == "null" {
		return sums, true
	}
	dec := json.NewDecoder(bytes.NewReader(result))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	floats := map[string]bool{}
	for dec.More() {
		keyTok, _ := dec.Token()
		valueTok, _ := dec.Token()
		key := keyTok.(string)
		num, ok := valueTok.(json.Number)
		if !ok {
			return nil, false
		}
		if floats[key] || strings.ContainsAny(string(num), ".eE") {
			floats[key] = true
			sums[key] = nil
			continue
		}
		v, ok := new(big.Int).SetString(string(num), 10)
		if !ok {
			panic(num)
		}
		if sums[key] == nil {
			sums[key] = new(big.Int)
		}
		sums[key].Add(sums[key], v)
	}
	return sums, true
}
