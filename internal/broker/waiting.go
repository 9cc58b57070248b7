package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Waiting reports whether any of queues holds a message ready for
// delivery (not one delivered and unacknowledged). It reads them with
// passive declares, in the order given, on a channel of its own, and
// stops at the first that holds one. Messages that move from queue to
// queue (a retry tier dead-letters into the work queue) are not missed
// when the queues they leave come first. A queue that does not exist, a
// closed connection or ctx done is an error; once ctx is done Waiting
// returns at once, and the broker's answer, which the connection's
// heartbeat bounds, is dropped.
func Waiting(ctx context.Context, conn *amqp.Connection, queues ...string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("broker: read queue depths: %w", err)
	}
	type answer struct {
		waiting bool
		err     error
	}
	done := make(chan answer, 1)
	go func() {
		waiting, err := waiting(conn, queues)
		done <- answer{waiting, err}
	}()
	select {
	case a := <-done:
		return a.waiting, a.err
	case <-ctx.Done():
		return false, fmt.Errorf("broker: read queue depths: %w", ctx.Err())
	}
}

func waiting(conn *amqp.Connection, queues []string) (bool, error) {
	ch, err := conn.Channel()
	if err != nil {
		return false, fmt.Errorf("broker: open a channel to read queue depths: %w", err)
	}
	defer func() { _ = ch.Close() }()
	for _, q := range queues {
		info, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		if err != nil {
			return false, fmt.Errorf("broker: read the depth of %q: %w", q, err)
		}
		if info.Messages > 0 {
			return true, nil
		}
	}
	return false, nil
}

// Prober reads the depth of queues on one channel of its own, opened on
// first use and again after an error (a failed passive declare closes its
// channel). It is safe for concurrent use; its calls take turns.
type Prober struct {
	conn *amqp.Connection
	mu   sync.Mutex
	ch   *amqp.Channel
}

// NewProber returns a prober of queues on conn, which the caller keeps
// open.
func NewProber(conn *amqp.Connection) *Prober { return &Prober{conn: conn} }

// Ready returns the number of messages ready for delivery in queue (not
// those delivered and unacknowledged), with a passive declare. A queue
// that does not exist or a closed connection is an error; the broker's
// answer is bounded by the connection's heartbeat.
func (p *Prober) Ready(queue string) (int, error) {
	d, err := p.Depth(queue)
	return d.Ready, err
}

// QueueDepth is what a passive declare tells of a queue.
type QueueDepth struct {
	// Ready is the number of messages ready for delivery (not those
	// delivered and unacknowledged).
	Ready int
	// Consumers is the number of consumers of the queue.
	Consumers int
}

// Depth returns queue's ready messages and consumers, as Ready does.
func (p *Prober) Depth(queue string) (QueueDepth, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch == nil || p.ch.IsClosed() {
		ch, err := p.conn.Channel()
		if err != nil {
			return QueueDepth{}, fmt.Errorf("broker: open a channel to read queue depths: %w", err)
		}
		p.ch = ch
	}
	info, err := p.ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		_ = p.ch.Close()
		p.ch = nil
		return QueueDepth{}, fmt.Errorf("broker: read the depth of %q: %w", queue, err)
	}
	return QueueDepth{Ready: info.Messages, Consumers: info.Consumers}, nil
}

// Close closes the prober's channel, if it has one.
func (p *Prober) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch != nil {
		_ = p.ch.Close()
		p.ch = nil
	}
}

// IsNotFound reports whether err says that a queue or exchange does not
// exist (AMQP 404, from a passive declare).
func IsNotFound(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == amqp.NotFound
}
