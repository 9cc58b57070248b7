package broker

import (
	"fmt"
	"time"

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
	// RetryTiers are the delays of the retry tiers, one queue each; nil
	// or empty means protocol.DefaultRetryTiers. Each must be a positive
	// whole number of milliseconds (see CheckRetryTiers). A tier's queue
	// is named after its delay, so processes with different tiers do not
	// conflict: each declares the tiers it uses.
	RetryTiers []time.Duration
}

func (o *TopologyOptions) deliveryLimit() int {
	if o == nil || o.DeliveryLimit <= 0 {
		return DefaultDeliveryLimit
	}
	return o.DeliveryLimit
}

func (o *TopologyOptions) retryTiers() []time.Duration {
	if o == nil || len(o.RetryTiers) == 0 {
		return protocol.DefaultRetryTiers
	}
	return o.RetryTiers
}

// CheckRetryTiers returns an error unless every tier is a positive whole
// number of milliseconds: x-message-ttl counts milliseconds, and a tier's
// name (protocol.RetryTierName) must say its delay exactly.
func CheckRetryTiers(tiers []time.Duration) error {
	for i, d := range tiers {
		if d <= 0 || d%time.Millisecond != 0 {
			return fmt.Errorf("retry tier %d is %v; tiers must be positive whole milliseconds", i, d)
		}
	}
	return nil
}

// queueSpec is one queue of the topology and its binding.
type queueSpec struct {
	name, exchange, key string
	args                amqp.Table
}

// DeclareTopology declares warren's exchanges, queues and bindings with
// names, idempotently: every process calls it at start. A queue that
// exists with other arguments is an error that says which.
//
// Besides the work, result and dead-letter queues it declares the retry
// exchange with one delay queue per retry tier, and the fanout control
// exchange (workers bind their own queues to it).
func DeclareTopology(conn *amqp.Connection, names protocol.Names, opts *TopologyOptions) error {
	tiers := opts.retryTiers()
	if err := CheckRetryTiers(tiers); err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	limit := opts.deliveryLimit()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("broker: open topology channel: %w", err)
	}
	defer func() { _ = ch.Close() }()

	exchanges := []struct{ name, kind string }{
		{names.JobsExchange, amqp.ExchangeDirect},
		{names.ResultsExchange, amqp.ExchangeDirect},
		{names.DeadLetterExchange, amqp.ExchangeDirect},
		{names.RetryExchange, amqp.ExchangeDirect},
		{names.ControlExchange, amqp.ExchangeFanout},
	}
	for _, x := range exchanges {
		if err := ch.ExchangeDeclare(x.name, x.kind, true, false, false, false, nil); err != nil {
			return fmt.Errorf("broker: declare exchange %q (it may exist with another kind): %w", x.name, err)
		}
	}
	queues := []queueSpec{
		{names.TasksQueue, names.JobsExchange, protocol.RoutingKeyTask,
			deadLettering(names.DeadLetterExchange, protocol.RoutingKeyTaskFailed, limit)},
		{names.ResultsQueue, names.ResultsExchange, protocol.RoutingKeyResult,
			deadLettering(names.DeadLetterExchange, protocol.RoutingKeyResultInvalid, limit)},
		{names.DeadQueue, names.DeadLetterExchange, protocol.RoutingKeyTaskFailed,
			deadLettering(names.DeadLetterExchange, protocol.RoutingKeyResultInvalid, limit)},
		{names.TasksDLQ, names.DeadLetterExchange, protocol.RoutingKeyTaskFailed, quorum()},
		{names.ResultsDLQ, names.DeadLetterExchange, protocol.RoutingKeyResultInvalid, quorum()},
	}
	for _, d := range tiers {
		queues = append(queues, retryTier(names, d))
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
// messages: the retry queues of protocol.DefaultRetryTiers and of tiers
// (pass the RetryTiers the topology was declared with, if not the
// defaults). Deleting what does not exist is not an error. Tests use it
// to leave nothing behind.
func DeleteTopology(conn *amqp.Connection, names protocol.Names, tiers ...time.Duration) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("broker: open channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	queues := []string{names.TasksQueue, names.ResultsQueue, names.DeadQueue, names.TasksDLQ, names.ResultsDLQ}
	seen := make(map[string]bool)
	for _, d := range append(append([]time.Duration(nil), protocol.DefaultRetryTiers...), tiers...) {
		q := names.RetryQueue(protocol.RetryTierName(d))
		if !seen[q] {
			seen[q] = true
			queues = append(queues, q)
		}
	}
	for _, q := range queues {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			return fmt.Errorf("broker: delete queue %q: %w", q, err)
		}
	}
	for _, x := range []string{names.JobsExchange, names.ResultsExchange, names.DeadLetterExchange, names.RetryExchange, names.ControlExchange} {
		if err := ch.ExchangeDelete(x, false, false); err != nil {
			return fmt.Errorf("broker: delete exchange %q: %w", x, err)
		}
	}
	return nil
}

func quorum() amqp.Table {
	return amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}
}

// deadLettering is a quorum queue that dead-letters, at least once, to
// exchange with key after limit deliveries or a reject.
func deadLettering(exchange, key string, limit int) amqp.Table {
	t := atLeastOnce(exchange, key)
	t["x-delivery-limit"] = int64(limit)
	return t
}

// atLeastOnce is a quorum queue that dead-letters to exchange with key and
// keeps each message until the queues it is dead-lettered to confirm it,
// so a dead letter is never lost; RabbitMQ requires reject-publish
// overflow for that.
func atLeastOnce(exchange, key string) amqp.Table {
	t := quorum()
	t["x-dead-letter-exchange"] = exchange
	t["x-dead-letter-routing-key"] = key
	t["x-dead-letter-strategy"] = "at-least-once"
	t[amqp.QueueOverflowArg] = amqp.QueueOverflowRejectPublish
	return t
}

// retryTier is the delay queue of one tier: messages wait d in it (a
// queue-level TTL, so the oldest message always expires first and none
// blocks another), then the broker dead-letters them back to the work
// queue.
func retryTier(names protocol.Names, d time.Duration) queueSpec {
	name := protocol.RetryTierName(d)
	args := atLeastOnce(names.JobsExchange, protocol.RoutingKeyTask)
	args["x-message-ttl"] = d.Milliseconds()
	return queueSpec{names.RetryQueue(name), names.RetryExchange, name, args}
}
