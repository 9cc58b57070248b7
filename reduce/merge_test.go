package reduce_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/reduce"
)

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
			results: []string{failedTask, `{"x": 1}`, `null`, `{"x": 1}`}, want: `{"x":2}`},
		{name: "every task failed", results: []string{failedTask}, want: `{}`},
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
		want, wantOK := mergeReference([]byte(result))
		out, err := builtins.Reduce("merge", scanOf(result))
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

// mergeReference merges one result with encoding/json: the integer
// sum of each key (nil for a key with a non-integer value), and whether
// merge must accept the result.
func mergeReference(result []byte) (map[string]*big.Int, bool) {
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
