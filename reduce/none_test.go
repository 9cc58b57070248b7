package reduce_test

import "testing"

func TestReduceNone(t *testing.T) {
	t.Parallel()
	runReduceCases(t, "none", []reduceCase{
		{name: "ignores results", results: []string{`1`, failedTask, `{"a": "b"}`}, want: `null`},
		{name: "ignores malformed results", results: []string{`{`}, want: `null`},
		{name: "no tasks", want: `null`},
	})
}
