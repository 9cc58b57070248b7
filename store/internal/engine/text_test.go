package engine

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStoredText(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"", ""},
		{"plain", "plain"},
		{"naïve ✓", "naïve ✓"},
		{"nul\x00byte", "nul\uFFFDbyte"},
		{"\x00\x00", "\uFFFD\uFFFD"},
		{"bad \xff\xfe run", "bad \uFFFD run"},
		{"cut \xc3", "cut \uFFFD"},
		{"both \x00\xff", "both \uFFFD\uFFFD"},
		{"kept \uFFFD", "kept \uFFFD"},
	} {
		got := storedText(tt.in)
		require.Equal(t, tt.want, got, "storedText(%q)", tt.in)
		require.Equal(t, got, storedText(got), "storedText(%q) is stable", tt.in)
	}
}
