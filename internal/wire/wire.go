// Package wire is warren's one mapping between its messages and AMQP:
// it builds the publishings of tasks, task batches, results, retries,
// dead letters and split batches, and reads a delivery, once, at the
// entry of the component that consumes it, into one typed value
// (TaskDelivery, DeadLetter, or the results of ReadResults). No other
// package reads a warren header. The names and their meaning are those
// of docs/protocol.md, byte for byte: workers in other languages depend
// on them.
package wire

import (
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
}

// headerDeliveryCount is the quorum queues' count of a message's earlier
// deliveries. It counts deliveries from the queue the message is in, so
// a copy that starts a new life elsewhere must not carry it.
const headerDeliveryCount = "x-delivery-count"

// maxHeaderError bounds the error text put in a dead letter's header: the
// headers must fit in one AMQP frame.
const maxHeaderError = 4096

// headerInt reads a non-negative integer header; 0 when it is absent or
// not one (protocol.HeaderInt says what counts as one).
func headerInt(h amqp.Table, key string) int {
	n, _ := protocol.HeaderInt(h, key)
	return n
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
