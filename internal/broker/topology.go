package broker

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenhq/warren/protocol"
)

// DefaultDeliveryLimit is the quorum queues' x-delivery-limit: a message
// delivered this many times without an ack (its consumers kept crashing)
// is dead-lettered by the broker itself.
const DefaultDeliveryLimit = 20

// DeadLetterDeliveryLimit is the x-delivery-limit of the dead-letter
// queues for people, tasks.dlq and results.dlq: the largest 32-bit AMQP
// integer, out of reach of any number of listings. Listing a queue takes
// its messages and returns them, and RabbitMQ counts every return as a
// delivery (3.10 and later; from 4.3, a channel closed with the messages
// unacknowledged still counts). They need a limit: from RabbitMQ 4.0 a
// quorum queue declared without one gets 20, and these queues have no
// dead-letter target, so the 21st listing would drop every message. -1,
// which lifts the limit on 4.x, drops a message at its first return on
// 3.x; a dead-letter target would move messages, not keep them.
const DeadLetterDeliveryLimit = math.MaxInt32

// TopologyOptions configures DeclareTopology.
type TopologyOptions struct {
	// DeliveryLimit is x-delivery-limit for the work and result queues;
	// 0 means DefaultDeliveryLimit.
	DeliveryLimit int
	// Logger receives a warning for each dead-letter queue that an earlier
	// warren declared without DeadLetterDeliveryLimit (it is used as it
	// is); nil means slog.Default().
	Logger *slog.Logger
	// RetryTiers are the delays of the retry tiers, one queue each; nil
	// or empty means protocol.DefaultRetryTiers. Each must be a positive
	// whole number of milliseconds (see CheckRetryTiers). A tier's queue
	// is named after its delay, so processes with different tiers do not
	// conflict: each declares the tiers it uses.
	RetryTiers []time.Duration
	// QuorumReplicas is x-quorum-initial-group-size of every quorum
	// queue: on how many nodes of the cluster a queue gets a replica when
	// it is created (at most as many as there are nodes). 0 declares
	// none, which leaves it to the broker: its quorum_cluster_size, 3
	// unless configured. RabbitMQ refuses to declare a queue again with
	// another value, or without one when it was created with one, so
	// every process of an installation must use the same; it does not
	// change the replicas of a queue that exists (rabbitmq-queues grow
	// and shrink do).
	QuorumReplicas int
}

func (o *TopologyOptions) quorumReplicas() int {
	if o == nil || o.QuorumReplicas <= 0 {
		return 0
	}
	return o.QuorumReplicas
}

func (o *TopologyOptions) deliveryLimit() int {
	if o == nil || o.DeliveryLimit <= 0 {
		return DefaultDeliveryLimit
	}
	return o.DeliveryLimit
}

func (o *TopologyOptions) logger() *slog.Logger {
	if o == nil || o.Logger == nil {
		return slog.Default()
	}
	return o.Logger
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

// CheckRetryTierOrder returns an error unless the tiers strictly
// increase: a later retry never waits less than an earlier one, and two
// equal tiers would be one queue. Servers and workers refuse tiers out of
// order alike, since they must agree.
func CheckRetryTierOrder(tiers []time.Duration) error {
	for i := 1; i < len(tiers); i++ {
		if tiers[i] <= tiers[i-1] {
			return fmt.Errorf("retry tier %d (%s) is not longer than tier %d (%s); tiers must increase, such as %s",
				i, tiers[i], i-1, tiers[i-1], tierList(protocol.DefaultRetryTiers))
		}
	}
	return nil
}

// tierList writes tiers as --retry-tiers takes them.
func tierList(tiers []time.Duration) string {
	names := make([]string, len(tiers))
	for i, d := range tiers {
		names[i] = protocol.RetryTierName(d)
	}
	return strings.Join(names, ",")
}

// queueSpec is one queue of the topology and its binding.
type queueSpec struct {
	name, exchange, key string
	args                amqp.Table
	// legacy, when set, are the arguments an earlier warren declared the
	// queue with: a queue that exists with them is used as it is.
	legacy amqp.Table
}

// DeclareTopology declares warren's exchanges, queues and bindings with
// names, idempotently: every process calls it at start. A queue that
// exists with other arguments is an error that says which, except a
// dead-letter queue for people that an earlier warren declared without
// DeadLetterDeliveryLimit: it is used as it is, with a warning
// (docs/operations.md says how to migrate it).
//
// Besides the work, result and dead-letter queues it declares the retry
// exchange with one delay queue per retry tier, the fanout control
// exchange (workers bind their own queues to it), and the outcomes RPC's
// queue (protocol.Names.OutcomesQueue), a quorum queue with no other
// argument that only the default exchange routes to.
func DeclareTopology(conn *amqp.Connection, names protocol.Names, opts *TopologyOptions) error {
	tiers := opts.retryTiers()
	if err := CheckRetryTiers(tiers); err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	limit, replicas := opts.deliveryLimit(), opts.quorumReplicas()
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
		{names.HeartbeatExchange, amqp.ExchangeFanout},
	}
	for _, x := range exchanges {
		if err := ch.ExchangeDeclare(x.name, x.kind, true, false, false, false, nil); err != nil {
			return fmt.Errorf("broker: declare exchange %q (it may exist with another kind): %w", x.name, err)
		}
	}
	queues := []queueSpec{
		workQueue(names, protocol.DefaultQueue, limit, replicas),
		{names.ResultsQueue, names.ResultsExchange, protocol.RoutingKeyResult,
			deadLettering(replicas, names.DeadLetterExchange, protocol.RoutingKeyResultInvalid, limit), nil},
		{names.DeadQueue, names.DeadLetterExchange, protocol.RoutingKeyTaskFailed,
			deadLettering(replicas, names.DeadLetterExchange, protocol.RoutingKeyResultInvalid, limit), nil},
		// An earlier warren declared these two as bare quorum queues,
		// before there was a replica setting.
		{names.TasksDLQ, names.DeadLetterExchange, protocol.RoutingKeyTaskFailed, parking(replicas), quorum(0)},
		{names.ResultsDLQ, names.DeadLetterExchange, protocol.RoutingKeyResultInvalid, parking(replicas), quorum(0)},
		// The outcomes RPC's requests: reached through the default
		// exchange (no binding), never dead-lettered.
		{names.OutcomesQueue, "", "", quorum(replicas), nil},
	}
	for _, d := range tiers {
		queues = append(queues, retryTier(names, protocol.DefaultQueue, d, replicas))
	}
	return declareQueues(conn, ch, queues, opts)
}

// BindAttempts binds the results queue to the results exchange with
// protocol.RoutingKeyAttempt too, idempotently: only a server that
// records attempts calls it (after DeclareTopology), so that workers'
// attempt messages reach the results queue once, and only once, a server
// that reads them runs; before, the broker drops them unrouted, and a
// worker's publish is confirmed all the same (docs/protocol.md, "Attempt
// messages").
func BindAttempts(conn *amqp.Connection, names protocol.Names) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("broker: open topology channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	if err := ch.QueueBind(names.ResultsQueue, protocol.RoutingKeyAttempt, names.ResultsExchange, false, nil); err != nil {
		return fmt.Errorf("broker: bind queue %q to %q/%q: %w", names.ResultsQueue, names.ResultsExchange, protocol.RoutingKeyAttempt, err)
	}
	return nil
}

// DeclareWorkQueue declares work queue q of names (protocol.Names.WorkQueue)
// and its retry tiers, as DeclareTopology declares the default one, on a
// channel of its own. The exchanges must exist (DeclareTopology). It is
// idempotent: every process that publishes to q or consumes it declares it.
func DeclareWorkQueue(conn *amqp.Connection, names protocol.Names, q string, opts *TopologyOptions) error {
	tiers := opts.retryTiers()
	if err := CheckRetryTiers(tiers); err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	if err := protocol.CheckQueueName(q); err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("broker: open topology channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	replicas := opts.quorumReplicas()
	queues := []queueSpec{workQueue(names, q, opts.deliveryLimit(), replicas)}
	for _, d := range tiers {
		queues = append(queues, retryTier(names, q, d, replicas))
	}
	return declareQueues(conn, ch, queues, opts)
}

// declareQueues declares and binds queues on ch (a queue an earlier warren
// declared otherwise, on a channel of its own: declareLegacy).
func declareQueues(conn *amqp.Connection, ch *amqp.Channel, queues []queueSpec, opts *TopologyOptions) error {
	for _, q := range queues {
		_, err := ch.QueueDeclare(q.name, true, false, false, false, q.args)
		if err != nil && q.legacy != nil && isPreconditionFailed(err) {
			legacyCh, legacyErr := declareLegacy(conn, q, opts.logger())
			if legacyErr != nil {
				return legacyErr
			}
			ch, err = legacyCh, nil // the refusal closed the last one
			defer func() { _ = legacyCh.Close() }()
		}
		if err != nil {
			return fmt.Errorf("broker: declare queue %q (it may exist with other arguments; delete it or use another WARREN_PREFIX): %w", q.name, err)
		}
		if q.exchange == "" {
			continue // the default exchange binds every queue by its name
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
	queues := []string{names.TasksQueue, names.ResultsQueue, names.DeadQueue, names.TasksDLQ, names.ResultsDLQ, names.OutcomesQueue}
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
	for _, x := range []string{names.JobsExchange, names.ResultsExchange, names.DeadLetterExchange, names.RetryExchange, names.ControlExchange, names.HeartbeatExchange} {
		if err := ch.ExchangeDelete(x, false, false); err != nil {
			return fmt.Errorf("broker: delete exchange %q: %w", x, err)
		}
	}
	return nil
}

// DeleteWorkQueue deletes work queue q of names and its retry tiers
// (protocol.DefaultRetryTiers and tiers), with their messages. Deleting
// what does not exist is not an error. Tests use it to leave nothing
// behind.
func DeleteWorkQueue(conn *amqp.Connection, names protocol.Names, q string, tiers ...time.Duration) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("broker: open channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	queues := []string{names.WorkQueue(q)}
	for _, d := range append(append([]time.Duration(nil), protocol.DefaultRetryTiers...), tiers...) {
		if name := names.QueueRetryQueue(q, protocol.RetryTierName(d)); !slices.Contains(queues, name) {
			queues = append(queues, name)
		}
	}
	for _, name := range queues {
		if _, err := ch.QueueDelete(name, false, false, false); err != nil {
			return fmt.Errorf("broker: delete queue %q: %w", name, err)
		}
	}
	return nil
}

// declareLegacy declares q with the arguments an earlier warren gave it,
// on a new channel (the broker closed the last one when it refused q's
// arguments), and returns that channel. If the queue does not have those
// either, it is the error of q's own arguments.
func declareLegacy(conn *amqp.Connection, q queueSpec, log *slog.Logger) (*amqp.Channel, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("broker: open topology channel: %w", err)
	}
	if _, err := ch.QueueDeclare(q.name, true, false, false, false, q.legacy); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("broker: declare queue %q (it exists with other arguments than warren's, %v): %w", q.name, q.args, err)
	}
	log.Warn("broker: this dead-letter queue was declared by an earlier warren, without a delivery limit of its own: on RabbitMQ 4, listing it more than 20 times drops its messages, unless a policy sets its delivery-limit; migrate it as docs/operations.md says (Dead-letter queues)",
		"queue", q.name)
	return ch, nil
}

// isPreconditionFailed reports whether err is the broker's
// PRECONDITION_FAILED, its answer to a queue declared again with other
// arguments.
func isPreconditionFailed(err error) bool {
	var amqpErr *amqp.Error
	return errors.As(err, &amqpErr) && amqpErr.Code == amqp.PreconditionFailed
}

// quorum is a quorum queue with replicas replicas when it is created, or
// as many as the broker gives it (0).
func quorum(replicas int) amqp.Table {
	t := amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}
	if replicas > 0 {
		t["x-quorum-initial-group-size"] = int64(replicas)
	}
	return t
}

// parking is a dead-letter queue for people: a quorum queue whose
// delivery limit no listing reaches (DeadLetterDeliveryLimit), and no
// dead-letter target, so a message leaves it only when someone removes
// it.
func parking(replicas int) amqp.Table {
	t := quorum(replicas)
	t["x-delivery-limit"] = int64(DeadLetterDeliveryLimit)
	return t
}

// deadLettering is a quorum queue that dead-letters, at least once, to
// exchange with key after limit deliveries or a reject.
func deadLettering(replicas int, exchange, key string, limit int) amqp.Table {
	t := atLeastOnce(replicas, exchange, key)
	t["x-delivery-limit"] = int64(limit)
	return t
}

// atLeastOnce is a quorum queue that dead-letters to exchange with key and
// keeps each message until the queues it is dead-lettered to confirm it,
// so a dead letter is never lost; RabbitMQ requires reject-publish
// overflow for that.
func atLeastOnce(replicas int, exchange, key string) amqp.Table {
	t := quorum(replicas)
	t["x-dead-letter-exchange"] = exchange
	t["x-dead-letter-routing-key"] = key
	t["x-dead-letter-strategy"] = "at-least-once"
	t[amqp.QueueOverflowArg] = amqp.QueueOverflowRejectPublish
	return t
}

// workQueue is work queue q: a quorum queue, of replicas replicas when it
// is created (0: the broker's default), that dead-letters to the
// dead-letter exchange after limit deliveries or a reject.
func workQueue(names protocol.Names, q string, limit, replicas int) queueSpec {
	return queueSpec{names.WorkQueue(q), names.JobsExchange, protocol.TaskRoutingKey(q),
		deadLettering(replicas, names.DeadLetterExchange, protocol.RoutingKeyTaskFailed, limit), nil}
}

// retryTier is the delay queue of one tier of work queue q: messages wait
// d in it (a queue-level TTL, so the oldest message always expires first
// and none blocks another), then the broker dead-letters them back to q.
func retryTier(names protocol.Names, q string, d time.Duration, replicas int) queueSpec {
	name := protocol.RetryTierName(d)
	args := atLeastOnce(replicas, names.JobsExchange, protocol.TaskRoutingKey(q))
	args["x-message-ttl"] = d.Milliseconds()
	return queueSpec{names.QueueRetryQueue(q, name), names.RetryExchange, protocol.RetryRoutingKey(q, name), args, nil}
}

// UnbindWorkQueue unbinds work queue q of names from the jobs exchange,
// the first step of deleting it while it is idle (DeleteIdleWorkQueue):
// a task published to q from then on is returned to its publisher
// (mandatory), which declares q again (DeclareWorkQueue binds it again)
// before it publishes once more, instead of landing in a queue about to
// be deleted. Its retry tiers stay bound. Unbinding what is not bound,
// or a queue that does not exist, is not an error.
func UnbindWorkQueue(conn *amqp.Connection, names protocol.Names, q string) error {
	if err := protocol.CheckQueueName(q); err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("broker: open topology channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	if err := ch.QueueUnbind(names.WorkQueue(q), protocol.TaskRoutingKey(q), names.JobsExchange, nil); err != nil {
		return fmt.Errorf("broker: unbind queue %q: %w", names.WorkQueue(q), err)
	}
	return nil
}

// DeleteIdleWorkQueue deletes work queue q of names and its retry tiers
// if none of them holds a message and q has no consumer, and reports
// whether it did. It checks with passive declares, then deletes the work
// queue, then each tier after a second look at it: a tier that received
// a message meanwhile keeps it, and q is declared again (DeclareWorkQueue
// with opts) so that the message has somewhere to go. A queue that does not exist counts as
// empty. The default queue is never deleted (an error).
//
// RabbitMQ refuses queue.delete's if-empty and if-unused on quorum
// queues (NOT_IMPLEMENTED, which closes the connection), so the check and
// the delete are two steps: call it only after UnbindWorkQueue, a sweep
// or more earlier, so that no publisher can put a task in q between them
// without first declaring it again. lost is the number of messages the
// deletes dropped all the same, which is 0 unless a publisher raced it.
func DeleteIdleWorkQueue(conn *amqp.Connection, names protocol.Names, q string, opts *TopologyOptions) (deleted bool, lost int, err error) {
	if q == protocol.DefaultQueue {
		return false, 0, errors.New("broker: the default work queue is never deleted")
	}
	if err := protocol.CheckQueueName(q); err != nil {
		return false, 0, fmt.Errorf("broker: %w", err)
	}
	tiers := opts.retryTiers()
	queues := []string{names.WorkQueue(q)}
	for _, d := range tiers {
		queues = append(queues, names.QueueRetryQueue(q, protocol.RetryTierName(d)))
	}
	p := NewProber(conn)
	defer p.Close()
	for _, name := range queues {
		d, err := p.Depth(name)
		switch {
		case IsNotFound(err):
			continue
		case err != nil:
			return false, 0, err
		case d.Ready > 0 || d.Consumers > 0:
			return false, 0, nil
		}
	}
	ch, err := conn.Channel()
	if err != nil {
		return false, 0, fmt.Errorf("broker: open topology channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	for i, name := range queues {
		if i > 0 {
			// A retry that landed in a tier after the check keeps its
			// tier, and gets its work queue back before it expires.
			if d, err := p.Depth(name); err == nil && d.Ready > 0 {
				return false, lost, DeclareWorkQueue(conn, names, q, opts)
			}
		}
		n, err := ch.QueueDelete(name, false, false, false)
		if err != nil {
			return i > 0, lost, fmt.Errorf("broker: delete queue %q: %w", name, err)
		}
		lost += n
	}
	return true, lost, nil
}
