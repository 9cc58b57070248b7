package broker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/protocol"
)

func msg(id string) amqp.Publishing {
	return amqp.Publishing{
		MessageId:    id,
		DeliveryMode: amqp.Persistent,
		ContentType:  protocol.ContentType,
		Body:         []byte(`{}`),
	}
}

func TestPublisherConfirmsRoutedMessages(t *testing.T) {
	t.Parallel()
	names, conn := amqptest.Topology(t, nil)
	p, err := broker.NewPublisher(conn, nil)
	require.NoError(t, err)
	defer p.Close()

	ctx := context.Background()
	for i := range 50 {
		require.NoError(t, p.PublishAndWait(ctx, names.JobsExchange, protocol.RoutingKeyTask, msg(fmt.Sprint(i))))
	}
	require.Equal(t, 50, amqptest.QueueDepth(t, conn, names.TasksQueue))
}

func TestPublisherReportsUnroutableMessages(t *testing.T) {
	t.Parallel()
	names, conn := amqptest.Topology(t, nil)
	p, err := broker.NewPublisher(conn, nil)
	require.NoError(t, err)
	defer p.Close()

	err = p.PublishAndWait(context.Background(), names.JobsExchange, "no-such-key", msg("lost"))
	require.ErrorIs(t, err, broker.ErrUnroutable)
}

// Routed and unroutable messages interleaved on one channel: each gets its
// own outcome, never its neighbour's.
func TestPublisherMatchesReturnsToTheirMessages(t *testing.T) {
	t.Parallel()
	names, conn := amqptest.Topology(t, nil)
	p, err := broker.NewPublisher(conn, &broker.PublisherOptions{Window: 64})
	require.NoError(t, err)
	defer p.Close()

	ctx := context.Background()
	const n = 2000
	confs := make([]*broker.Confirmation, n)
	for i := range n {
		key := protocol.RoutingKeyTask
		if i%3 == 0 {
			key = "nowhere"
		}
		confs[i], err = p.Publish(ctx, names.JobsExchange, key, msg(fmt.Sprintf("m-%d", i%7)))
		require.NoError(t, err)
	}
	routed := 0
	for i, c := range confs {
		err := c.Wait(ctx)
		if i%3 == 0 {
			require.ErrorIs(t, err, broker.ErrUnroutable, "message %d", i)
		} else {
			require.NoError(t, err, "message %d", i)
			routed++
		}
	}
	require.Equal(t, routed, amqptest.QueueDepth(t, conn, names.TasksQueue))
}

func TestPublisherWindowBoundsUnconfirmedPublishes(t *testing.T) {
	t.Parallel()
	names, conn := amqptest.Topology(t, nil)
	p, err := broker.NewPublisher(conn, &broker.PublisherOptions{Window: 4})
	require.NoError(t, err)
	defer p.Close()

	var wg sync.WaitGroup
	errs := make(chan error, 400)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				errs <- p.PublishAndWait(context.Background(), names.JobsExchange, protocol.RoutingKeyTask, msg(fmt.Sprintf("%d-%d", w, i)))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, 400, amqptest.QueueDepth(t, conn, names.TasksQueue))
}

// A publish that closes the channel (unknown exchange) fails every
// unconfirmed message with ErrClosed instead of hanging.
func TestPublisherFailsPendingWhenChannelCloses(t *testing.T) {
	t.Parallel()
	_, conn := amqptest.Topology(t, nil)
	p, err := broker.NewPublisher(conn, nil)
	require.NoError(t, err)
	defer p.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := p.Publish(ctx, "warren-no-such-exchange", "x", msg("a"))
	require.NoError(t, err)
	require.ErrorIs(t, c.Wait(ctx), broker.ErrClosed)
	select {
	case <-p.Done():
	case <-ctx.Done():
		t.Fatal("publisher not done after its channel closed")
	}
	_, err = p.Publish(ctx, "", "x", msg("b"))
	require.True(t, errors.Is(err, broker.ErrClosed), "got %v", err)
}

func TestDialFailureIsOneLine(t *testing.T) {
	t.Parallel()
	_, err := broker.Dial(context.Background(), "amqp://guest:secret@127.0.0.1:1/", "x")
	require.Error(t, err)
	require.NotContains(t, err.Error(), "secret")
	require.NotContains(t, err.Error(), "\n")
	require.Contains(t, err.Error(), "cannot connect to RabbitMQ")
}

// notTheUser is a user id that is not the test connection's: RabbitMQ
// refuses a message that claims it the way it refuses one over its
// max_message_size, by closing the channel with PRECONDITION_FAILED.
const notTheUser = "warren-test-not-the-user"

// A message the broker refuses closes the channel it came on; every
// message unconfirmed on it fails with ErrRefused, and a publish after
// that with ErrClosed alone: it was never sent.
func TestPublisherReportsARefusedMessage(t *testing.T) {
	t.Parallel()
	names, conn := amqptest.Topology(t, nil)
	p, err := broker.NewPublisher(conn, nil)
	require.NoError(t, err)
	defer p.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bad := msg("refused")
	bad.UserId = notTheUser
	c, err := p.Publish(ctx, names.JobsExchange, protocol.RoutingKeyTask, bad)
	require.NoError(t, err)
	err = c.Wait(ctx)
	require.ErrorIs(t, err, broker.ErrRefused)
	require.ErrorIs(t, err, broker.ErrClosed)
	var amqpErr *amqp.Error
	require.ErrorAs(t, err, &amqpErr)
	require.Equal(t, amqp.PreconditionFailed, amqpErr.Code)

	_, err = p.Publish(ctx, names.JobsExchange, protocol.RoutingKeyTask, msg("after"))
	require.ErrorIs(t, err, broker.ErrClosed)
	require.NotErrorIs(t, err, broker.ErrRefused, "a message never sent was not refused")
}

// PublishAlone tells which message the broker refuses, and the refusal
// costs the publisher's own channel nothing.
func TestPublishAloneRefusalCostsOnlyItsOwnChannel(t *testing.T) {
	t.Parallel()
	names, conn := amqptest.Topology(t, nil)
	p, err := broker.NewPublisher(conn, nil)
	require.NoError(t, err)
	defer p.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	waiting, err := p.Publish(ctx, names.JobsExchange, protocol.RoutingKeyTask, msg("neighbour"))
	require.NoError(t, err)
	bad := msg("refused")
	bad.UserId = notTheUser
	err = p.PublishAlone(ctx, names.JobsExchange, protocol.RoutingKeyTask, bad)
	require.ErrorIs(t, err, broker.ErrRefused)
	require.ErrorContains(t, err, "PRECONDITION_FAILED")

	require.NoError(t, waiting.Wait(ctx), "a message on the publisher's channel is not affected")
	require.NoError(t, p.PublishAlone(ctx, names.JobsExchange, protocol.RoutingKeyTask, msg("alone")))
	require.NoError(t, p.PublishAndWait(ctx, names.JobsExchange, protocol.RoutingKeyTask, msg("after")))
	select {
	case <-p.Done():
		t.Fatal("the publisher's channel closed")
	default:
	}
	require.Equal(t, 3, amqptest.QueueDepth(t, conn, names.TasksQueue))
	require.ErrorIs(t, p.PublishAlone(ctx, names.JobsExchange, "no-such-key", msg("lost")), broker.ErrUnroutable)
}

// What RabbitMQ does with a message over its max_message_size (128 MiB by
// default on 3.x, 16 MiB on 4.x): it takes the whole body, then closes
// the channel with PRECONDITION_FAILED, "message size N is larger than
// configured max size M"; the connection stays open.
func TestPublishAloneReportsAMessageOverTheBrokersMaxSize(t *testing.T) {
	t.Parallel()
	names, conn := amqptest.Topology(t, nil)
	p, err := broker.NewPublisher(conn, nil)
	require.NoError(t, err)
	defer p.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	big := msg("big")
	big.Body = make([]byte, 128<<20+1)
	err = p.PublishAlone(ctx, names.JobsExchange, protocol.RoutingKeyTask, big)
	require.ErrorIs(t, err, broker.ErrRefused, "is the broker's max_message_size above 128 MiB?")
	require.ErrorContains(t, err, "message size 134217729 is larger than")
	require.False(t, conn.IsClosed())
	require.NoError(t, p.PublishAndWait(ctx, names.JobsExchange, protocol.RoutingKeyTask, msg("small")))
}

// A channel the broker nacks NackLimit times in a row is closed, so that
// its owner publishes on a new one. (The nacks come from a full queue
// that rejects publishes.)
func TestPublisherClosesItsChannelAfterNacksInARow(t *testing.T) {
	t.Parallel()
	conn := amqptest.Dial(t)
	queue := amqptest.Prefix(t) + "full.q"
	ch, err := conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclare(queue, true, false, false, false,
		amqp.Table{"x-queue-type": "quorum", "x-max-length": int64(1), "x-overflow": "reject-publish"})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = ch.QueueDelete(queue, false, false, false) })

	p, err := broker.NewPublisher(conn, nil)
	require.NoError(t, err)
	defer p.Close()
	ctx := context.Background()
	nacks := 0
	for i := 0; i < 20 && nacks < broker.NackLimit; i++ {
		err := p.PublishAndWait(ctx, "", queue, msg(fmt.Sprint(i)))
		if err == nil {
			require.Zero(t, nacks, "the queue is full once a publish was nacked")
			continue
		}
		require.ErrorIs(t, err, broker.ErrNacked)
		nacks++
	}
	require.Equal(t, broker.NackLimit, nacks)
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("the publisher's channel is still open after %d nacks in a row", broker.NackLimit)
	}
	require.ErrorIs(t, p.PublishAndWait(ctx, "", queue, msg("last")), broker.ErrClosed)
}

// A nack the broker sends before the confirms of earlier publishes is
// the message's outcome, even when a multiple-ack that covers its tag
// follows: RabbitMQ nacks a publish to a queue that rejects it at once,
// while earlier publishes to a quorum queue wait for replication, and it
// then acks those with one multiple-ack up to a later tag, which by AMQP
// leaves the nacked tag out. (amqp091-go's NotifyPublish turns the
// nack into an ack then; a retry a worker publishes to a retry tier
// whose queue client asks a dead node was lost that way, acked by the
// worker as confirmed.)
func TestPublisherKeepsANackThatAMultipleAckCovers(t *testing.T) {
	t.Parallel()
	conn := amqptest.Dial(t)
	prefix := amqptest.Prefix(t)
	quorumQ, fullQ := prefix+"slow.q", prefix+"full.q"
	ch, err := conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclare(quorumQ, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	require.NoError(t, err)
	_, err = ch.QueueDeclare(fullQ, true, false, false, false,
		amqp.Table{"x-queue-type": "classic", "x-max-length": int64(1), "x-overflow": "reject-publish"})
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = ch.QueueDelete(quorumQ, false, false, false)
		_, _ = ch.QueueDelete(fullQ, false, false, false)
	})

	p, err := broker.NewPublisher(conn, nil)
	require.NoError(t, err)
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Each round fills the small queue (an ack there, so that its nacks
	// never come NackLimit in a row), then publishes one message the
	// quorum queue confirms after its commit, one the full queue nacks at
	// once, and another for the quorum queue, which the broker confirms
	// with the first in one multiple-ack; then empties the small queue.
	const rounds = 100
	for i := range rounds {
		require.NoError(t, p.PublishAndWait(ctx, "", fullQ, msg(fmt.Sprint(i, "-fill"))), "round %d: fill the small queue", i)
		var confs [3]*broker.Confirmation
		for j, q := range []string{quorumQ, fullQ, quorumQ} {
			confs[j], err = p.Publish(ctx, "", q, msg(fmt.Sprintf("%d-%d", i, j)))
			require.NoError(t, err)
		}
		require.NoError(t, confs[0].Wait(ctx), "round %d: the first quorum queue publish", i)
		require.ErrorIs(t, confs[1].Wait(ctx), broker.ErrNacked, "round %d: the full queue's nack was lost", i)
		require.NoError(t, confs[2].Wait(ctx), "round %d: the second quorum queue publish", i)
		_, err := ch.QueuePurge(fullQ, false)
		require.NoError(t, err)
	}
	require.Equal(t, 2*rounds, amqptest.QueueDepth(t, conn, quorumQ))
}

// Nacks to one queue count in a row even when publishes to another queue,
// confirmed, come between them: RabbitMQ 3.10 can nack every publish of a
// channel to one quorum queue while it confirms those to the others.
func TestPublisherCountsNacksInARowPerQueue(t *testing.T) {
	t.Parallel()
	conn := amqptest.Dial(t)
	prefix := amqptest.Prefix(t)
	okQ, fullQ := prefix+"ok.q", prefix+"full.q"
	ch, err := conn.Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclare(okQ, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	require.NoError(t, err)
	_, err = ch.QueueDeclare(fullQ, true, false, false, false,
		amqp.Table{"x-queue-type": "classic", "x-max-length": int64(0), "x-overflow": "reject-publish"})
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = ch.QueueDelete(okQ, false, false, false)
		_, _ = ch.QueueDelete(fullQ, false, false, false)
	})

	p, err := broker.NewPublisher(conn, nil)
	require.NoError(t, err)
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range broker.NackLimit {
		require.NoError(t, p.PublishAndWait(ctx, "", okQ, msg(fmt.Sprint("ok-", i))))
		require.ErrorIs(t, p.PublishAndWait(ctx, "", fullQ, msg(fmt.Sprint("full-", i))), broker.ErrNacked)
	}
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("the publisher's channel is still open after %d nacks in a row to %s", broker.NackLimit, fullQ)
	}
}
