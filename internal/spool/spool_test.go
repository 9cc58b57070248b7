package spool

import (
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func payloads(ps ...string) iter.Seq2[json.RawMessage, error] {
	return func(yield func(json.RawMessage, error) bool) {
		for _, p := range ps {
			if !yield(json.RawMessage(p), nil) {
				return
			}
		}
	}
}

func collect(t *testing.T, sp *Spool) []string {
	t.Helper()
	var out []string
	for p, err := range sp.All() {
		require.NoError(t, err)
		out = append(out, string(p))
	}
	return out
}

// Small spools stay in memory, large ones move to a file; either way the
// payloads come back in order, each in its own slice, as often as asked.
func TestSpoolKeepsPayloadsInOrder(t *testing.T) {
	t.Parallel()
	big := `"` + strings.Repeat("x", memoryLimit/4) + `"`
	for _, tc := range []struct {
		name   string
		in     []string
		onDisk bool
	}{
		{"empty", nil, false},
		{"small", []string{`1`, `{"a":2}`, `"three"`}, false},
		{"large", []string{big, `1`, big, big, big, `2`}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sp, err := Tasks(payloads(tc.in...))
			require.NoError(t, err)
			defer sp.Close()
			require.Equal(t, tc.onDisk, sp.file != nil)
			got := collect(t, sp)
			require.Equal(t, len(tc.in), len(got))
			for i := range tc.in {
				require.Equal(t, tc.in[i], got[i], "payload %d", i)
			}
			require.Equal(t, got, collect(t, sp), "read twice")

			var kept []json.RawMessage
			for p, err := range sp.All() {
				require.NoError(t, err)
				kept = append(kept, p)
			}
			if len(kept) > 1 {
				kept[0] = append(kept[0], '!') // must not run into the next
				require.Equal(t, tc.in[1], string(kept[1]))
			}
		})
	}
}

func TestSpoolReturnsTheProducersError(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	_, err := Tasks(func(yield func(json.RawMessage, error) bool) {
		for i := range 3 {
			if !yield(json.RawMessage(fmt.Sprint(i)), nil) {
				return
			}
		}
		yield(nil, boom)
	})
	require.ErrorIs(t, err, boom)
}
