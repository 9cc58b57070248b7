package broker

import (
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenhq/warren/protocol"
)

// DefaultDeliveryLimit is the quorum queues' x-delivery-limit: a message
// delivered this many times without an ack (its consumers kept crashing)
// is dead-lettered by the broker itself.
const DefaultDeliveryLimit = 20

// TopologyOptions configures DeclareTopology.
type TopologyOptions struct {
	// DeliveryLimit is x-delivery-limit for the work and result queues;
	// 0 means DefaultDeliveryLimit.
	DeliveryLimit int
}

// DeclareTopology declares warren's exchanges, queues and bindings with
// names, idempotently: every process calls it at start. A queue that
// exists with other arguments is an error that says which.
func DeclareTopology(conn *amqp.Connection, names protocol.Names, opts *TopologyOptions) error {
	limit := DefaultDeliveryLimit
	if opts != nil && opts.DeliveryLimit > 0 {
		limit = opts.DeliveryLimit
	}
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("broker: open topology channel: %w", err)
	}
	defer func() { _ = ch.Close() }()

	for _, x := range []string{names.JobsExchange, names.ResultsExchange, names.DeadLetterExchange} {
		if err := ch.ExchangeDeclare(x, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
			return fmt.Errorf("broker: declare exchange %q: %w", x, err)
		}
	}
	queues := []struct {
		name, exchange, key string
		args                amqp.Table
	}{
		{names.TasksQueue, names.JobsExchange, protocol.RoutingKeyTask,
			deadLettering(names, protocol.RoutingKeyTaskFailed, limit)},
		{names.ResultsQueue, names.ResultsExchange, protocol.RoutingKeyResult,
			deadLettering(names, protocol.RoutingKeyResultInvalid, limit)},
		{names.DeadQueue, names.DeadLetterExchange, protocol.RoutingKeyTaskFailed,
			deadLettering(names, protocol.RoutingKeyResultInvalid, limit)},
		{names.TasksDLQ, names.DeadLetterExchange, protocol.RoutingKeyTaskFailed, quorum()},
		{names.ResultsDLQ, names.DeadLetterExchange, protocol.RoutingKeyResultInvalid, quorum()},
	}
	for _, q := range queues {
		if _, err := ch.QueueDeclare(q.name, true, false, false, false, q.args); err != nil {
			return fmt.Errorf("broker: declare queue %q (it may exist with other arguments; delete it or use another WARREN_PREFIX): %w", q.name, err)
		}
		if err := ch.QueueBind(q.name, q.key, q.exchange, false, nil); err != nil {
			return fmt.Errorf("broker: bind queue %q to %q/%q: %w", q.name, q.exchange, q.key, err)
		}
	}
	return nil
}

// DeleteTopology deletes every exchange and queue of names, with their
// messages. Tests use it to leave nothing behind.
func DeleteTopology(conn *amqp.Connection, names protocol.Names) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("broker: open channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	for _, q := range []string{names.TasksQueue, names.ResultsQueue, names.DeadQueue, names.TasksDLQ, names.ResultsDLQ} {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			return fmt.Errorf("broker: delete queue %q: %w", q, err)
		}
	}
	for _, x := range []string{names.JobsExchange, names.ResultsExchange, names.DeadLetterExchange} {
		if err := ch.ExchangeDelete(x, false, false); err != nil {
			return fmt.Errorf("broker: delete exchange %q: %w", x, err)
		}
	}
	return nil
}

func quorum() amqp.Table {
	return amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}
}

// deadLettering is a quorum queue that dead-letters, at least once, to the
// dead-letter exchange with key after limit deliveries or a reject.
func deadLettering(names protocol.Names, key string, limit int) amqp.Table {
	t := quorum()
	t["x-delivery-limit"] = int64(limit)
	t["x-dead-letter-exchange"] = names.DeadLetterExchange
	t["x-dead-letter-routing-key"] = key
	// At-least-once dead-lettering keeps a message in its queue until the
	// dead-letter queues confirm it; it requires reject-publish overflow.
	t["x-dead-letter-strategy"] = "at-least-once"
	t[amqp.QueueOverflowArg] = amqp.QueueOverflowRejectPublish
	return t
}
