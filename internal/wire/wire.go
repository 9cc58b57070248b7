// Package wire is warren's one mapping between its messages and AMQP:
// it builds the publishings of tasks, task batches, results, retries,
// dead letters, split batches, cancellations and heartbeats, and reads a
// delivery, once, at the entry of the component that consumes it, into
// one typed value (TaskDelivery, DeadLetter, a protocol.Heartbeat, or the
// results of ReadResults). No other package reads a warren header. The names and their meaning are those
// of docs/protocol.md, byte for byte: workers in other languages depend
// on them.
package wire

import (
	"math"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenhq/warren/protocol"
)

// Outbound is one publishing and where it goes.
type Outbound struct {
	// Exchange and Key are the exchange and routing key to publish to.
	Exchange, Key string
	// Msg is the message.
	Msg amqp.Publishing
	// Optional says the message may go unrouted (no queue bound for its
	// key yet: an attempt message before any server records attempts),
	// which its publisher takes as delivered, not as a failure.
	Optional bool
}

// headerDeliveryCount is the quorum queues' count of a message's earlier
// deliveries. It counts deliveries from the queue the message is in, so
// a copy that starts a new life elsewhere must not carry it.
const headerDeliveryCount = "x-delivery-count"

// maxHeaderError bounds the error text put in a dead letter's header: the
// headers must fit in one AMQP frame.
const maxHeaderError = 4096

// headerInt reads a non-negative integer header; 0 when it is absent or
// not one (lookupInt says what counts as one).
func headerInt(h amqp.Table, key string) int {
	n, _ := lookupInt(h, key)
	return n
}

// lookupInt reads a non-negative integer header (at most MaxInt32) of any
// AMQP integer type (clients in other languages pick different widths), an
// integral float, or a decimal string. ok is false when the header is
// absent or anything else.
func lookupInt(h amqp.Table, key string) (n int, ok bool) {
	var v64 int64
	switch v := h[key].(type) {
	case int:
		v64 = int64(v)
	case int8:
		v64 = int64(v)
	case int16:
		v64 = int64(v)
	case int32:
		v64 = int64(v)
	case int64:
		v64 = v
	case uint8:
		v64 = int64(v)
	case uint16:
		v64 = int64(v)
	case uint32:
		v64 = int64(v)
	case uint64:
		if v > math.MaxInt32 {
			return 0, false
		}
		v64 = int64(v)
	case float32:
		return floatInt(float64(v))
	case float64:
		return floatInt(v)
	case string:
		p, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, false
		}
		v64 = p
	default:
		return 0, false
	}
	if v64 < 0 || v64 > math.MaxInt32 {
		return 0, false
	}
	return int(v64), true
}

// floatInt is lookupInt of a float header: whole numbers only.
func floatInt(f float64) (int, bool) {
	if f < 0 || f > math.MaxInt32 || f != math.Trunc(f) {
		return 0, false
	}
	return int(f), true
}

// Generation is the x-generation header of a delivery: the generation of
// the task(s) it carries; 0 (unknown) when it is absent or not a
// non-negative integer.
func Generation(d amqp.Delivery) int {
	return headerInt(d.Headers, protocol.HeaderGeneration)
}

// setGeneration sets the x-generation header of h to g, or removes it when
// g is 0 (unknown).
func setGeneration(h amqp.Table, g int) {
	if g > 0 {
		h[protocol.HeaderGeneration] = int64(g)
	} else {
		delete(h, protocol.HeaderGeneration)
	}
}

// headerString reads a string header; "" when it is absent or not a
// string.
func headerString(h amqp.Table, key string) string {
	s, _ := h[key].(string)
	return s
}

// headerTime reads an RFC 3339 time header, in UTC; zero when it is
// absent or not a time.
func headerTime(h amqp.Table, key string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, headerString(h, key))
	if err != nil {
		return time.Time{}
	}
	return t.UTC()
}

// formatTime writes a time header: RFC 3339 in UTC, as precise as the
// clock.
func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
