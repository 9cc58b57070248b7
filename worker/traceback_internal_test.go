package worker

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/protocol"
)

// A panic's stack over protocol.MaxTracebackBytes keeps its top (the
// panic's site), cut at a character's boundary.
func TestPanickedKeepsTheTopOfALongStackWhole(t *testing.T) {
	value := strings.Repeat("é", protocol.MaxTracebackBytes) // 2 bytes each, after the 7 of "panic: "
	tb := tracebackOf(panicked(errors.New("boom"), value))
	require.LessOrEqual(t, len(tb), protocol.MaxTracebackBytes)
	require.Greater(t, len(tb), protocol.MaxTracebackBytes-utf8.UTFMax)
	require.True(t, utf8.ValidString(tb), "cut inside a character")
	require.True(t, strings.HasPrefix(tb, "panic: éé"), "the top is kept")
}
