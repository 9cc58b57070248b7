package reduce_test

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/reduce"
)

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
		{name: "failed tasks are skipped", results: []string{failedTask, `5`, failedTask, `6`}, want: `11`},
		{name: "every task failed", results: []string{failedTask}, want: `0`},
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

// intScan scans n tasks whose results are the integer literals lit
// appends, written into one reused buffer so that nothing is kept for the
// reducer; want is their exact sum.
func intScan(n int, lit func(b []byte, i int) []byte) (scan reduce.ScanFunc, want *big.Int) {
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
			scan, want := intScan(n, tc.lit)
			out, err := builtins.Reduce("sum", scan)
			require.NoError(t, err)
			require.Equal(t, want.String(), string(out))
		})
	}
}

func BenchmarkReduceSum(b *testing.B) {
	benchmarkReduce(b, "sum", func(i int) string { return strconv.Itoa(i * 7919) })
}
