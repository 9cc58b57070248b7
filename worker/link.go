package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/protocol"
)

// closeTimeout bounds the close handshake of a connection: a connection
// whose peer is gone must not hold up a reconnect or a shutdown.
const closeTimeout = 5 * time.Second

// link is everything one connected period of Run holds on the broker: the
// consumer and publisher connections, the publisher, the control
// consumer, and the task consumer with its channel.
type link struct {
	tag           string // the task consumers' tags start with it
	node          string // the address of the node the consumer connection went to
	consumerConn  *amqp.Connection
	publisherConn *amqp.Connection
	pub           *broker.Publisher
	control       *controlConsumer
	ch            *amqp.Channel // the task consumers'
	// consumers maps each task consumer's tag to the work queue it
	// consumes.
	consumers map[string]string
	// deliveries are every task consumer's deliveries, in one stream,
	// closed once all of them are (after a cancel, or with the channel).
	deliveries <-chan amqp.Delivery
	// gone is closed when one of several task consumers ends: the broker
	// cancelled it (its queue was deleted) or the channel closed. nil (never
	// ready) with one consumer, whose deliveries closing says as much.
	gone <-chan struct{}
	// quit, closed by close, stops merging deliveries nobody reads.
	quit chan struct{}

	consumerLost  <-chan *amqp.Error // the task channel's close reason
	publisherLost <-chan *amqp.Error // the publisher connection's

	closeOnce sync.Once
}

// connect dials both connections, declares the topology, subscribes to
// the control exchange, then starts the task consumer with tag: cancels
// are heard before the first task is taken. On error it closes whatever
// it had opened.
func (w *Worker) connect(ctx context.Context, tag string) (_ *link, err error) {
	l := &link{tag: tag, quit: make(chan struct{})}
	defer func() {
		if err != nil {
			l.close()
		}
	}()
	// Both connections go to one node: Dial starts at the node it last
	// connected to.
	l.consumerConn, err = w.nodes.Dial(ctx, "warren worker "+w.cfg.Name+" (consumer)")
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	l.node = l.consumerConn.RemoteAddr().String()
	topology := &broker.TopologyOptions{DeliveryLimit: w.cfg.DeliveryLimit, RetryTiers: w.cfg.RetryTiers, QuorumReplicas: w.cfg.QuorumReplicas}
	if err := broker.DeclareTopology(l.consumerConn, w.names, topology); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	// Outcomes are published on a connection of their own: when RabbitMQ
	// blocks publishers (a memory or disk alarm) it blocks their whole
	// connection, and the consumer must still be able to ack and nack.
	l.publisherConn, err = w.nodes.Dial(ctx, "warren worker "+w.cfg.Name+" (publisher)")
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	l.publisherLost = l.publisherConn.NotifyClose(make(chan *amqp.Error, 1))
	if l.pub, err = broker.NewPublisher(l.publisherConn, &broker.PublisherOptions{Logger: w.cfg.Logger}); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	if l.control, err = w.consumeControl(l.consumerConn, tag+" control"); err != nil {
		return nil, err
	}
	go l.control.run(w)
	for _, q := range w.cfg.Queues {
		if q == protocol.DefaultQueue {
			continue // declared with the topology
		}
		if err := broker.DeclareWorkQueue(l.consumerConn, w.names, q, topology); err != nil {
			return nil, fmt.Errorf("worker: %w", err)
		}
	}
	if err := l.consume(w.names, w.cfg.Queues, tag, w.cfg.Prefetch); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	l.consumerLost = l.ch.NotifyClose(make(chan *amqp.Error, 1))
	return l, nil
}

// consume starts a consumer of each of queues on one channel, each with a
// prefetch of prefetch divided by their number, rounded up, and tag
// followed by its queue's name, and merges their deliveries.
func (l *link) consume(names protocol.Names, queues []string, tag string, prefetch int) error {
	ch, err := l.consumerConn.Channel()
	if err != nil {
		return fmt.Errorf("open consumer channel: %w", err)
	}
	l.ch = ch
	each := (prefetch + len(queues) - 1) / len(queues)
	if err := ch.Qos(each, 0, false); err != nil {
		return fmt.Errorf("set prefetch %d: %w", each, err)
	}
	l.consumers = make(map[string]string, len(queues))
	sources := make([]<-chan amqp.Delivery, 0, len(queues))
	for _, q := range queues {
		t := tag + " " + q
		d, err := ch.Consume(names.WorkQueue(q), t, false, false, false, false, nil)
		if err != nil {
			return fmt.Errorf("consume %q: %w", names.WorkQueue(q), err)
		}
		l.consumers[t] = q
		sources = append(sources, d)
	}
	if len(sources) == 1 {
		// One queue, the common case: no hop through a goroutine per
		// delivery. Its channel closing is the consumer's end.
		l.deliveries = sources[0]
		return nil
	}
	l.deliveries, l.gone = merge(sources, l.quit)
	return nil
}

// merge forwards the deliveries of sources into one channel, closed once
// every source is; gone is closed as soon as one of them is. Once quit is
// closed, what nobody took is dropped: it was on a channel being closed,
// and goes back to its queue with it.
func merge(sources []<-chan amqp.Delivery, quit <-chan struct{}) (deliveries <-chan amqp.Delivery, gone <-chan struct{}) {
	out := make(chan amqp.Delivery)
	ended := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for _, src := range sources {
		wg.Go(func() {
			for d := range src {
				select {
				case out <- d:
				case <-quit:
				}
			}
			once.Do(func() { close(ended) })
		})
	}
	go func() {
		wg.Wait()
		close(out)
	}()
	return out, ended
}

// close closes both connections, then waits for the publisher's and the
// control consumer's goroutines. The connections go first and within
// closeTimeout, so a dead peer cannot hold it up; the task consumer's
// unacked deliveries go back to the queue with its connection.
func (l *link) close() { l.closeOnce.Do(l.closeNow) }

func (l *link) closeNow() {
	close(l.quit)
	for _, c := range []*amqp.Connection{l.consumerConn, l.publisherConn} {
		if c != nil {
			_ = c.CloseDeadline(time.Now().Add(closeTimeout))
		}
	}
	if l.ch != nil {
		_ = l.ch.Close()
	}
	if l.control != nil {
		l.control.close()
	}
	if l.pub != nil {
		_ = l.pub.Close()
	}
}

// lossReason is err with the broker's reason for closing a channel or
// connection, if it gave one, wrapped in ErrConnectionLost.
func (l *link) lossReason(err error) error {
	for _, c := range []<-chan *amqp.Error{l.consumerLost, l.control.closes, l.publisherLost} {
		select {
		case reason, ok := <-c:
			if ok && reason != nil {
				return fmt.Errorf("%w: %v: %v", ErrConnectionLost, err, reason)
			}
		default:
		}
	}
	return fmt.Errorf("%w: %v", ErrConnectionLost, err)
}

// fatal reports whether err, from connect, is a refusal that no retry
// can fix: the topology exists with other arguments, or the user may not
// declare or use it. (broker.Dial's errors carry no AMQP code, so a
// refused login is retried.)
func fatal(err error) bool {
	var ae *amqp.Error
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.Code {
	case amqp.PreconditionFailed, amqp.AccessRefused, amqp.NotAllowed:
		return true
	}
	return false
}
