package wire_test

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/wire"
	"github.com/warrenhq/warren/protocol"
)

// A heartbeat goes to the heartbeat exchange, transient, and expires after
// three of its intervals; ReadHeartbeat gives it back.
func TestHeartbeat(t *testing.T) {
	t.Parallel()
	names := protocol.NamesFor("hb-")
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	h := protocol.Heartbeat{ID: "run-1", Name: "w1", State: protocol.HeartbeatRunning, Queues: []string{"default"},
		Types: []string{"echo"}, Concurrency: 4, InFlight: 1, StartedAt: now.Add(-time.Hour), IntervalMS: 50}
	out, err := wire.Heartbeat(names, h, now)
	require.NoError(t, err)
	require.Equal(t, "hb-heartbeat.x", out.Exchange)
	require.Empty(t, out.Key)
	require.Equal(t, protocol.ContentType, out.Msg.ContentType)
	require.Equal(t, amqp.Transient, out.Msg.DeliveryMode)
	require.Equal(t, "heartbeat", out.Msg.Type)
	require.Equal(t, "150", out.Msg.Expiration)
	require.Equal(t, now, out.Msg.Timestamp)

	got, err := wire.ReadHeartbeat(amqp.Delivery{Body: out.Msg.Body})
	require.NoError(t, err)
	require.Equal(t, h.ID, got.ID)
	require.Equal(t, h.Types, got.Types)
	require.Equal(t, 50*time.Millisecond, got.Interval())

	h.IntervalMS = 0
	out, err = wire.Heartbeat(names, h, now)
	require.NoError(t, err)
	require.Equal(t, "15000", out.Msg.Expiration, "no interval: three of the default's")

	_, err = wire.Heartbeat(names, protocol.Heartbeat{State: protocol.HeartbeatRunning}, now)
	require.ErrorIs(t, err, protocol.ErrMalformed, "a heartbeat without an id")
	_, err = wire.ReadHeartbeat(amqp.Delivery{Body: []byte("{")})
	require.ErrorIs(t, err, protocol.ErrMalformed)
}
