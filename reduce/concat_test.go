package reduce_test

import (
	"fmt"
	"testing"
)

func TestReduceConcat(t *testing.T) {
	t.Parallel()
	runReduceCases(t, "concat", []reduceCase{
		{name: "arrays", results: []string{`[1, 2]`, `[]`, `[{"a": 3}]`, `["x"]`}, want: `[1,2,{"a":3},"x"]`},
		{name: "strings", results: []string{`"ab"`, `""`, `"c\u0064"`, `"<&>"`}, want: `"abcd<&>"`},
		{name: "escapes stay escaped", results: []string{`"a\"b"`, `"\n"`}, want: `"a\"b\n"`},
		{name: "failed tasks and nulls are skipped",
			results: []string{failedTask, `null`, `[1]`, failedTask, `null`, `[2]`}, want: `[1,2]`},
		{name: "invalid UTF-8 becomes U+FFFD", results: []string{"[\"a\xffb\"]", "[\"\xc0\"]"}, want: "[\"a\uFFFDb\",\"\uFFFD\"]"},
		{name: "only empty arrays", results: []string{`[]`, `[]`}, want: `[]`},
		{name: "only nulls", results: []string{`null`, failedTask}, want: `[]`},
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

func BenchmarkReduceConcat(b *testing.B) {
	benchmarkReduce(b, "concat", func(i int) string { return fmt.Sprintf(`[%d, "item-%d"]`, i, i) })
}
