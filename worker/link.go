package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenhq/warren/internal/broker"
)

// closeTimeout bounds the close handshake of a connection: a connection
// whose peer is gone must not hold up a reconnect or a shutdown.
const closeTimeout = 5 * time.Second

// link is everything one connected period of Run holds on the broker: the
// consumer and publisher connections, the publisher, the control
// consumer, and the task consumer with its channel.
type link struct {
	tag           string // the task consumer's
	node          string // the address of the node the consumer connection went to
	consumerConn  *amqp.Connection
	publisherConn *amqp.Connection
	pub           *broker.Publisher
	control       *controlConsumer
	ch            *amqp.Channel // the task consumer's
	deliveries    <-chan amqp.Delivery

	consumerLost  <-chan *amqp.Error // the task channel's close reason
	publisherLost <-chan *amqp.Error // the publisher connection's

	closeOnce sync.Once
}

// connect dials both connections, declares the topology, subscribes to
// the control exchange, then starts the task consumer with tag: cancels
// are heard before the first task is taken. On error it closes whatever
// it had opened.
func (w *Worker) connect(ctx context.Context, tag string) (_ *link, err error) {
	l := &link{tag: tag}
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
	if l.ch, l.deliveries, err = broker.Consume(l.consumerConn, w.names.TasksQueue, tag, w.cfg.Prefetch); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	l.consumerLost = l.ch.NotifyClose(make(chan *amqp.Error, 1))
	return l, nil
}

// close closes both connections, then waits for the publisher's and the
// control consumer's goroutines. The connections go first and within
// closeTimeout, so a dead peer cannot hold it up; the task consumer's
// unacked deliveries go back to the queue with its connection.
func (l *link) close() { l.closeOnce.Do(l.closeNow) }

func (l *link) closeNow() {
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
