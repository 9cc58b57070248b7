package wire

import (
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenhq/warren/protocol"
)

// Heartbeat is a worker's heartbeat h, published at now, for the
// heartbeat exchange. It is transient and expires after three of its
// intervals, when it says nothing any more: a server that reads it later
// would take a stopped worker for a live one.
func Heartbeat(names protocol.Names, h protocol.Heartbeat, now time.Time) (Outbound, error) {
	body, err := protocol.EncodeHeartbeat(h)
	if err != nil {
		return Outbound{}, err
	}
	return Outbound{Exchange: names.HeartbeatExchange, Msg: amqp.Publishing{
		ContentType:  protocol.ContentType,
		DeliveryMode: amqp.Transient,
		Timestamp:    now,
		Type:         "heartbeat",
		Expiration:   strconv.FormatInt((3 * h.Interval()).Milliseconds(), 10),
		Body:         body,
	}}, nil
}

// ReadHeartbeat reads a heartbeat delivery. Every error wraps
// protocol.ErrMalformed.
func ReadHeartbeat(d amqp.Delivery) (protocol.Heartbeat, error) {
	return protocol.DecodeHeartbeat(d.Body)
}
