package reduce_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReduceCollect(t *testing.T) {
	t.Parallel()
	runReduceCases(t, "collect", []reduceCase{
		{name: "compacts each result in task order",
			results: []string{`{"a": [1, 2]}`, ` "x y" `, "\n3\n", `true`, `null`},
			want:    `[{"a":[1,2]},"x y",3,true,null]`},
		{name: "null where a task failed",
			results: []string{failedTask, `1`, failedTask, `2`, failedTask},
			want:    `[null,1,null,2,null]`},
		{name: "every task failed", results: []string{failedTask, failedTask}, want: `[null,null]`},
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

func BenchmarkReduceCollect(b *testing.B) {
	benchmarkReduce(b, "collect", func(i int) string {
		return fmt.Sprintf(`{"key": "thumbs/%d.jpg", "width": 320, "ok": true}`, i)
	})
}
