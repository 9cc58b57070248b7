package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// Retry tiers that do not increase are refused when the server starts.
func TestServerRefusesRetryTiersThatDoNotIncrease(t *testing.T) {
	t.Parallel()
	code, _, errOut := runCLI(t, map[string]string{"WARREN_RETRY_TIERS": "10s,5s",
		// Were the tiers accepted, the start would fail here instead.
		"WARREN_AMQP_URL":     "amqp://guest:guest@127.0.0.1:1/",
		"WARREN_DATABASE_URL": "sqlite://" + filepath.Join(t.TempDir(), "w.db")}, "server")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "tiers must increase")
}
