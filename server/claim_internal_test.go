package server

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The relay claims no more tasks per round trip than half of
// MaxInflightBytes holds in payloads of MaxTaskBytes.
func TestRelayClaimFitsHalfOfMaxInflightBytes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  Config
		want int
	}{
		{Config{}, 256},                          // 256 MiB of 1 MiB payloads
		{Config{MaxTaskBytes: 64 << 10}, 500},    // RelayBatchSize
		{Config{RelayBatchSize: 50}, 50},         // fewer asked for
		{Config{MaxInflightBytes: 1 << 30}, 500}, // 512 MiB of 1 MiB payloads
		{Config{MaxTaskBytes: 3 << 20, MaxInflightBytes: 8 << 20}, 1},
	} {
		cfg := c.cfg.withDefaults()
		require.NoError(t, cfg.validate(), "%+v", c.cfg)
		require.Equal(t, c.want, (&Server{cfg: cfg}).relayClaim(), "%+v", c.cfg)
	}
}
