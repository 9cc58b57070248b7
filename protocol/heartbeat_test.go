package protocol_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/protocol"
)

// A heartbeat's text and lists are bounded: a server keeps thousands of
// them, so one that could grow it without bound is malformed.
func TestHeartbeatsAreBounded(t *testing.T) {
	t.Parallel()
	ok := protocol.Heartbeat{ID: "w1", Name: "host:1", State: protocol.HeartbeatRunning, Queues: []string{"default"}, Types: []string{"echo"}}
	body, err := protocol.EncodeHeartbeat(ok)
	require.NoError(t, err)
	got, err := protocol.DecodeHeartbeat(body)
	require.NoError(t, err)
	require.Equal(t, ok.Types, got.Types)

	long := strings.Repeat("x", 257)
	many := make([]string, 1025)
	for i := range many {
		many[i] = "t"
	}
	for name, h := range map[string]protocol.Heartbeat{
		"a long version": {ID: "w1", State: protocol.HeartbeatRunning, Version: long},
		"a long queue":   {ID: "w1", State: protocol.HeartbeatRunning, Queues: []string{long}},
		"many types":     {ID: "w1", State: protocol.HeartbeatRunning, Types: many},
	} {
		body, err := json.Marshal(h)
		require.NoError(t, err)
		_, err = protocol.DecodeHeartbeat(body)
		require.ErrorIs(t, err, protocol.ErrMalformed, name)
		_, err = protocol.EncodeHeartbeat(h)
		require.ErrorIs(t, err, protocol.ErrMalformed, name)
	}
}
