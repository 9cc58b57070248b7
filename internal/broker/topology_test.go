package broker_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/protocol"
)

// shortTiers keep the tier tests fast.
var shortTiers = []time.Duration{200 * time.Millisecond, 400 * time.Millisecond}

func TestDeclareTopologyIsIdempotent(t *testing.T) {
	t.Parallel()
	names, conn := amqptest.Topology(t, nil)
	require.NoError(t, broker.DeclareTopology(conn, names, nil))
	require.NoError(t, broker.DeclareTopology(conn, names, nil))
}

func TestDeclareTopologyConflictingArgumentsIsAClearError(t *testing.T) {
	t.Parallel()
	names, conn := amqptest.Topology(t, nil)
	err := broker.DeclareTopology(conn, names, &broker.TopologyOptions{DeliveryLimit: 3})
	require.Error(t, err)
	require.Contains(t, err.Error(), names.TasksQueue)
}

// QuorumReplicas sets x-quorum-initial-group-size on every quorum queue,
// and RabbitMQ refuses to declare a queue again with another value or
// without one: every process of an installation must agree.
func TestDeclareTopologyQuorumReplicas(t *testing.T) {
	t.Parallel()
	opts := &broker.TopologyOptions{QuorumReplicas: 1, RetryTiers: shortTiers}
	names, conn := amqptest.Topology(t, opts)
	require.NoError(t, broker.DeclareTopology(conn, names, opts), "the same setting: idempotent")

	queues := []string{names.TasksQueue, names.ResultsQueue, names.DeadQueue, names.TasksDLQ, names.ResultsDLQ,
		names.OutcomesQueue, names.RetryQueue("200ms"), names.RetryQueue("400ms")}
	for q, args := range amqptest.QueueArguments(t, queues...) {
		require.Equal(t, float64(1), args["x-quorum-initial-group-size"], "%s: %v", q, args)
		require.Equal(t, "quorum", args["x-queue-type"], "%s: %v", q, args)
	}

	for _, other := range []int{0, 3} {
		err := broker.DeclareTopology(conn, names, &broker.TopologyOptions{QuorumReplicas: other, RetryTiers: shortTiers})
		require.ErrorContains(t, err, names.TasksQueue, "QuorumReplicas %d", other)
		require.ErrorContains(t, err, "x-quorum-initial-group-size", "QuorumReplicas %d", other)
	}
}

// The outcomes RPC's queue is a bare quorum queue, reached through the
// default exchange: requests are never dead-lettered.
func TestDeclareTopologyOutcomesQueue(t *testing.T) {
	t.Parallel()
	names, _ := amqptest.Topology(t, &broker.TopologyOptions{RetryTiers: shortTiers})
	args := amqptest.QueueArguments(t, names.OutcomesQueue)[names.OutcomesQueue]
	require.Equal(t, map[string]any{"x-queue-type": "quorum"}, args)
}

func TestDeclareTopologyRejectsBadRetryTiers(t *testing.T) {
	t.Parallel()
	conn := amqptest.Dial(t)
	names := protocol.NamesFor(amqptest.Prefix(t))
	for _, tiers := range [][]time.Duration{{0}, {time.Second, -time.Second}, {1500 * time.Microsecond}} {
		err := broker.DeclareTopology(conn, names, &broker.TopologyOptions{RetryTiers: tiers})
		require.ErrorContains(t, err, "retry tier", "%v", tiers)
	}
	// Nothing was declared.
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer func() { _ = ch.Close() }()
	_, err = ch.QueueDeclarePassive(names.TasksQueue, true, false, false, false, nil)
	require.Error(t, err)
}

// Each tier is a quorum queue whose TTL is its delay and which
// dead-letters back to the work queue at least once: exactly the
// arguments below, or redeclaring them would fail.
func TestDeclareTopologyRetryTierArguments(t *testing.T) {
	t.Parallel()
	names, conn := amqptest.Topology(t, &broker.TopologyOptions{RetryTiers: shortTiers})
	tier := func(ttl int64) amqp.Table {
		return amqp.Table{
			"x-queue-type":              "quorum",
			"x-message-ttl":             ttl,
			"x-dead-letter-exchange":    names.JobsExchange,
			"x-dead-letter-routing-key": protocol.RoutingKeyTask,
			"x-dead-letter-strategy":    "at-least-once",
			"x-overflow":                "reject-publish",
		}
	}
	declare := func(queue string, args amqp.Table) error {
		ch, err := conn.Channel()
		require.NoError(t, err)
		defer func() { _ = ch.Close() }()
		_, err = ch.QueueDeclare(queue, true, false, false, false, args)
		return err
	}
	require.NoError(t, declare(names.RetryQueue("200ms"), tier(200)))
	require.NoError(t, declare(names.RetryQueue("400ms"), tier(400)))
	require.Error(t, declare(names.RetryQueue("200ms"), tier(201)), "the TTL must be the tier's delay")
}

// The broker itself must do what the tiers rely on: a quorum queue with
// a queue-level TTL holds a message for the delay, then dead-letters it
// to the work queue, at least once.
func TestRetryTiersDelayMessagesThenReturnThemToTheWorkQueue(t *testing.T) {
	t.Parallel()
	names, conn := amqptest.Topology(t, &broker.TopologyOptions{RetryTiers: shortTiers})
	p, err := broker.NewPublisher(conn, nil)
	require.NoError(t, err)
	defer p.Close()

	ch, err := conn.Channel()
	require.NoError(t, err)
	defer func() { _ = ch.Close() }()
	deliveries, err := ch.Consume(names.TasksQueue, "", true, false, false, false, nil)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	sent := map[string]time.Time{}
	for _, d := range []time.Duration{400 * time.Millisecond, 200 * time.Millisecond} {
		key := protocol.RetryTierName(d)
		sent[key] = time.Now()
		m := msg(key)
		m.Headers = amqp.Table{protocol.HeaderRetry: int64(1)}
		require.NoError(t, p.PublishAndWait(ctx, names.RetryExchange, key, m))
	}
	for _, want := range []string{"200ms", "400ms"} { // the shorter delay first
		select {
		case d := <-deliveries:
			waited := time.Since(sent[d.MessageId])
			require.Equal(t, want, d.MessageId)
			delay := shortTiers[0]
			if want == "400ms" {
				delay = shortTiers[1]
			}
			require.GreaterOrEqual(t, waited, delay, "%s came back early", want)
			require.Less(t, waited, delay+2*time.Second, "%s came back late", want)
			require.Equal(t, int64(1), d.Headers[protocol.HeaderRetry], "headers are kept")
			require.Equal(t, "expired", d.Headers["x-first-death-reason"])
			require.Equal(t, names.RetryQueue(want), d.Headers["x-first-death-queue"])
		case <-ctx.Done():
			t.Fatalf("the %s message did not come back to %s", want, names.TasksQueue)
		}
	}
	for _, d := range shortTiers {
		require.Zero(t, amqptest.QueueDepth(t, conn, names.RetryQueue(protocol.RetryTierName(d))))
	}
}

// The control exchange is a fanout: every bound queue gets a copy.
func TestControlExchangeFansOut(t *testing.T) {
	t.Parallel()
	names, conn := amqptest.Topology(t, nil)
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer func() { _ = ch.Close() }()
	var queues []string
	for range 2 {
		q, err := ch.QueueDeclare("", false, true, true, false, nil)
		require.NoError(t, err)
		require.NoError(t, ch.QueueBind(q.Name, "", names.ControlExchange, false, nil))
		queues = append(queues, q.Name)
	}
	p, err := broker.NewPublisher(conn, nil)
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, broker.PublishCancel(context.Background(), p, names, "job-1"))
	for _, q := range queues {
		d, ok, err := ch.Get(q, true)
		require.NoError(t, err)
		require.True(t, ok, "queue %s got no copy", q)
		c, err := protocol.DecodeControl(d.Body)
		require.NoError(t, err)
		require.Equal(t, protocol.Control{Type: protocol.ControlCancel, JobID: "job-1"}, c)
	}
}

// A cancel that no worker hears is not an error: there is nothing to
// skip.
func TestPublishCancelWithoutWorkersSucceeds(t *testing.T) {
	t.Parallel()
	names, conn := amqptest.Topology(t, nil)
	p, err := broker.NewPublisher(conn, nil)
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, broker.PublishCancel(context.Background(), p, names, "job-1"))
	require.Error(t, broker.PublishCancel(context.Background(), p, names, ""), "a job id is required")
}

func TestDeleteTopologyLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	conn := amqptest.Dial(t)
	names := protocol.NamesFor(amqptest.Prefix(t))
	extra := []time.Duration{150 * time.Millisecond}
	require.NoError(t, broker.DeclareTopology(conn, names, &broker.TopologyOptions{RetryTiers: extra}))
	require.NoError(t, broker.DeclareTopology(conn, names, nil)) // the default tiers too
	require.NoError(t, broker.DeleteTopology(conn, names, extra...))
	require.NoError(t, broker.DeleteTopology(conn, names, extra...), "deleting twice is fine")

	queues := []string{names.TasksQueue, names.ResultsQueue, names.DeadQueue, names.TasksDLQ, names.ResultsDLQ,
		names.OutcomesQueue, names.RetryQueue("150ms")}
	for _, d := range protocol.DefaultRetryTiers {
		queues = append(queues, names.RetryQueue(protocol.RetryTierName(d)))
	}
	for _, q := range queues {
		ch, err := conn.Channel()
		require.NoError(t, err)
		_, err = ch.QueueDeclarePassive(q, true, false, false, false, nil)
		require.Error(t, err, "queue %s is still there", q)
	}
	for _, x := range []string{names.JobsExchange, names.ResultsExchange, names.DeadLetterExchange, names.RetryExchange, names.ControlExchange} {
		ch, err := conn.Channel()
		require.NoError(t, err)
		err = ch.ExchangeDeclarePassive(x, amqp.ExchangeDirect, true, false, false, false, nil)
		require.Error(t, err, "exchange %s is still there", x)
	}
}

// The dead-letter queues for people have a delivery limit no listing
// reaches, and no dead-letter target: exactly these arguments, or
// redeclaring them would fail.
func TestDeclareTopologyDeadLetterQueueArguments(t *testing.T) {
	t.Parallel()
	names, conn := amqptest.Topology(t, nil)
	declare := func(queue string, args amqp.Table) error {
		ch, err := conn.Channel()
		require.NoError(t, err)
		defer func() { _ = ch.Close() }()
		_, err = ch.QueueDeclare(queue, true, false, false, false, args)
		return err
	}
	for _, q := range []string{names.TasksDLQ, names.ResultsDLQ} {
		require.NoError(t, declare(q, amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int64(2147483647)}), q)
		require.Error(t, declare(q, amqp.Table{"x-queue-type": "quorum"}), "%s has a delivery limit", q)
	}
}

// An installation whose dead-letter queues an earlier warren declared
// (quorum, nothing else) keeps working: they are used as they are, with a
// warning that says how to migrate them. Any other arguments are still an
// error.
func TestDeclareTopologyKeepsTheDeadLetterQueuesOfAnEarlierWarren(t *testing.T) {
	t.Parallel()
	conn := amqptest.Dial(t)
	names := protocol.NamesFor(amqptest.Prefix(t))
	t.Cleanup(func() { _ = broker.DeleteTopology(conn, names) })
	ch, err := conn.Channel()
	require.NoError(t, err)
	for _, q := range []string{names.TasksDLQ, names.ResultsDLQ} {
		_, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
		require.NoError(t, err)
	}
	require.NoError(t, ch.Close())

	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	require.NoError(t, broker.DeclareTopology(conn, names, &broker.TopologyOptions{Logger: log}))
	require.Equal(t, 2, strings.Count(logs.String(), "level=WARN"), logs.String())
	require.Contains(t, logs.String(), names.TasksDLQ)
	require.Contains(t, logs.String(), names.ResultsDLQ)
	require.Contains(t, logs.String(), "docs/operations.md")

	// The rest is declared, and the old queues are bound.
	p, err := broker.NewPublisher(conn, nil)
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, p.PublishAndWait(context.Background(), names.DeadLetterExchange, protocol.RoutingKeyTaskFailed, msg("dead")))
	require.Equal(t, 1, amqptest.QueueDepth(t, conn, names.TasksDLQ))
	require.Equal(t, 1, amqptest.QueueDepth(t, conn, names.DeadQueue))

	ch, err = conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDelete(names.ResultsDLQ, false, false, false)
	require.NoError(t, err)
	_, err = ch.QueueDeclare(names.ResultsDLQ, true, false, false, false, amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int64(5)})
	require.NoError(t, err)
	require.NoError(t, ch.Close())
	err = broker.DeclareTopology(conn, names, &broker.TopologyOptions{Logger: log})
	require.ErrorContains(t, err, names.ResultsDLQ)
}

// The replica setting does not apply to dead-letter queues an earlier
// warren declared, before there was one: they are kept as they are too.
func TestDeclareTopologyWithQuorumReplicasKeepsTheDeadLetterQueuesOfAnEarlierWarren(t *testing.T) {
	t.Parallel()
	conn := amqptest.Dial(t)
	names := protocol.NamesFor(amqptest.Prefix(t))
	t.Cleanup(func() { _ = broker.DeleteTopology(conn, names) })
	ch, err := conn.Channel()
	require.NoError(t, err)
	for _, q := range []string{names.TasksDLQ, names.ResultsDLQ} {
		_, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
		require.NoError(t, err)
	}
	require.NoError(t, ch.Close())

	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	require.NoError(t, broker.DeclareTopology(conn, names, &broker.TopologyOptions{QuorumReplicas: 1, Logger: log}))
	require.Equal(t, 2, strings.Count(logs.String(), "level=WARN"), logs.String())
}
