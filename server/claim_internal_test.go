package server

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A relay round holds at most half of MaxInflightBytes in payloads: the
// bound is on what it claims, not on tasks of MaxTaskBytes each, so that
// rounds of small tasks stay large.
func TestRelayRoundHoldsHalfOfMaxInflightBytes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  Config
		want int64
	}{
		{Config{}, 256 << 20},
		{Config{MaxInflightBytes: 1 << 30}, 512 << 20},
		{Config{MaxTaskBytes: 3 << 20, MaxInflightBytes: 8 << 20}, 4 << 20},
	} {
		cfg := c.cfg.withDefaults()
		require.NoError(t, cfg.validate(), "%+v", c.cfg)
		require.Equal(t, c.want, (&Server{cfg: cfg}).relayRoundBytes(), "%+v", c.cfg)
	}
}
