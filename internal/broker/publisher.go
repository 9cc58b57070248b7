package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Publishing errors. Match them with errors.Is.
var (
	// ErrUnroutable means the broker returned a mandatory message: no queue
	// is bound for its exchange and routing key. It was not stored.
	ErrUnroutable = errors.New("broker: message unroutable (returned by the broker)")
	// ErrNacked means the broker refused to take responsibility for the
	// message (basic.nack).
	ErrNacked = errors.New("broker: message nacked by the broker")
	// ErrClosed means the publisher's channel or connection closed before
	// the message was confirmed; it may or may not have been stored.
	ErrClosed = errors.New("broker: publisher closed before confirmation")
	// ErrBlocked means the broker blocked the publisher's connection (a
	// memory or disk alarm) for longer than PublisherOptions.BlockedWait.
	// Nothing was sent.
	ErrBlocked = errors.New("broker: connection blocked by the broker")
)

// DefaultBlockedWait is how long Publish waits, by default, for a blocked
// connection to be unblocked.
const DefaultBlockedWait = 30 * time.Second

// DefaultConfirmWindow is the default number of publishes a Publisher lets
// wait for their confirms at once.
const DefaultConfirmWindow = 256

// PublisherOptions configures a Publisher.
type PublisherOptions struct {
	// Window is the maximum number of unconfirmed publishes; Publish blocks
	// while the window is full. 0 means DefaultConfirmWindow.
	Window int
	// BlockedWait bounds how long Publish waits while the broker blocks
	// the connection (connection.blocked: a memory or disk alarm) before
	// it gives up with ErrBlocked. 0 means DefaultBlockedWait.
	BlockedWait time.Duration
	// Logger receives one line when the broker blocks the connection and
	// one when it unblocks it; nil means slog.Default().
	Logger *slog.Logger
}

// Publisher publishes persistent, mandatory messages on one channel in
// confirm mode and reports, for each, whether the broker confirmed it.
// Returned (unroutable) messages are reported as ErrUnroutable even though
// the broker also acks them. It is safe for concurrent use.
type Publisher struct {
	ch      *amqp.Channel
	window  chan struct{}
	blocked *blockState

	pubMu sync.Mutex // serialises publishes so delivery tags are known

	mu      sync.Mutex // guards the fields below; held only for map work
	pending map[uint64]*Confirmation
	closed  bool
	reason  error

	done chan struct{} // closed when the listener has stopped
}

// Confirmation is the outcome of one publish, known once Done is closed.
type Confirmation struct {
	messageID string
	exchange  string
	key       string
	tag       uint64
	returned  string // reply text of a basic.return, if any
	err       error
	done      chan struct{}
	release   func()
}

// Done is closed once the outcome is known.
func (c *Confirmation) Done() <-chan struct{} { return c.done }

// Err returns nil if the broker confirmed the message and did not return
// it, or an error wrapping ErrUnroutable, ErrNacked or ErrClosed. It must
// only be called after Done is closed.
func (c *Confirmation) Err() error { return c.err }

// Wait blocks until the outcome is known or ctx is done, and returns Err
// (or ctx's error).
func (c *Confirmation) Wait(ctx context.Context) error {
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return fmt.Errorf("waiting for the confirm of %s: %w", c.messageID, ctx.Err())
	}
}

func (c *Confirmation) resolve(err error) {
	c.err = err
	close(c.done)
	c.release()
}

// NewPublisher opens a channel on conn, puts it in confirm mode and returns
// a Publisher that owns the channel.
func NewPublisher(conn *amqp.Connection, opts *PublisherOptions) (*Publisher, error) {
	window := DefaultConfirmWindow
	blockedWait := DefaultBlockedWait
	log := slog.Default()
	if opts != nil {
		if opts.Window > 0 {
			window = opts.Window
		}
		if opts.BlockedWait > 0 {
			blockedWait = opts.BlockedWait
		}
		if opts.Logger != nil {
			log = opts.Logger
		}
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("broker: open publisher channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("broker: enable publisher confirms: %w", err)
	}
	p := &Publisher{
		ch:      ch,
		blocked: newBlockState(blockedWait, log),
		window:  make(chan struct{}, window),
		pending: make(map[uint64]*Confirmation),
		done:    make(chan struct{}),
	}
	// Both notification channels are unbuffered and read by ONE goroutine:
	// the library sends a basic.return before the basic.ack of the same
	// message, so the return is always recorded before its confirm is
	// resolved.
	returns := ch.NotifyReturn(make(chan amqp.Return))
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation))
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	go p.listen(returns, confirms, closes)
	go p.blocked.follow(conn.NotifyBlocked(make(chan amqp.Blocking, 4)))
	return p, nil
}

// Publish sends msg to exchange with routing key, mandatory, and returns
// its Confirmation. msg.MessageId must be set and unique among the
// publisher's unconfirmed messages to the same exchange and key (returns
// are matched to publishes by those three); persistence is the caller's choice
// (warren's messages set DeliveryMode amqp.Persistent). Publish blocks
// while the confirm window is full, until ctx is done.
func (p *Publisher) Publish(ctx context.Context, exchange, key string, msg amqp.Publishing) (*Confirmation, error) {
	if msg.MessageId == "" {
		return nil, errors.New("broker: publish without a message id")
	}
	if err := p.blocked.wait(ctx); err != nil {
		return nil, err
	}
	select {
	case p.window <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("broker: waiting for room in the confirm window: %w", ctx.Err())
	case <-p.done:
		return nil, p.closedErr()
	}
	var once sync.Once
	release := func() { once.Do(func() { <-p.window }) }

	p.pubMu.Lock()
	defer p.pubMu.Unlock()
	c := &Confirmation{messageID: msg.MessageId, exchange: exchange, key: key, done: make(chan struct{}), release: release}
	// Never call into the library while holding p.mu: its reader goroutine
	// holds its own locks while it hands a confirm to the listener, which
	// needs p.mu; a cycle would make the library drop that confirm.
	c.tag = p.ch.GetNextPublishSeqNo()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		release()
		return nil, p.closedErr()
	}
	p.pending[c.tag] = c
	p.mu.Unlock()

	if err := p.ch.PublishWithContext(ctx, exchange, key, true, false, msg); err != nil {
		p.mu.Lock()
		delete(p.pending, c.tag)
		p.mu.Unlock()
		release()
		return nil, fmt.Errorf("broker: publish %s to %q/%q: %w", msg.MessageId, exchange, key, err)
	}
	return c, nil
}

// PublishAndWait publishes msg and waits for its confirm.
func (p *Publisher) PublishAndWait(ctx context.Context, exchange, key string, msg amqp.Publishing) error {
	c, err := p.Publish(ctx, exchange, key, msg)
	if err != nil {
		return err
	}
	return c.Wait(ctx)
}

// Done is closed when the publisher's channel has closed; the publisher
// is then unusable.
func (p *Publisher) Done() <-chan struct{} { return p.done }

// Close closes the publisher's channel. Unconfirmed publishes fail with
// ErrClosed.
func (p *Publisher) Close() error {
	err := p.ch.Close()
	<-p.done
	if errors.Is(err, amqp.ErrClosed) {
		return nil
	}
	return err
}

func (p *Publisher) closedErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reason != nil {
		return fmt.Errorf("%w: %v", ErrClosed, p.reason)
	}
	return ErrClosed
}

func (p *Publisher) listen(returns <-chan amqp.Return, confirms <-chan amqp.Confirmation, closes <-chan *amqp.Error) {
	defer close(p.done)
	for {
		select {
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			p.recordReturn(r)
		case c, ok := <-confirms:
			if !ok {
				p.failPending(<-closes)
				return
			}
			p.confirm(c)
		}
	}
}

// recordReturn marks the oldest unconfirmed publish with the returned
// message's id, exchange and routing key: the broker returns messages in
// publish order, while it may confirm routed ones later (quorum queues
// confirm after replication), so the match must not rely on confirm order.
func (p *Publisher) recordReturn(r amqp.Return) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var oldest *Confirmation
	for _, c := range p.pending {
		if c.messageID == r.MessageId && c.exchange == r.Exchange && c.key == r.RoutingKey && c.returned == "" && (oldest == nil || c.tag < oldest.tag) {
			oldest = c
		}
	}
	if oldest != nil {
		oldest.returned = fmt.Sprintf("%d %s (exchange %q, routing key %q)", r.ReplyCode, r.ReplyText, r.Exchange, r.RoutingKey)
	}
}

func (p *Publisher) confirm(conf amqp.Confirmation) {
	p.mu.Lock()
	c := p.pending[conf.DeliveryTag]
	delete(p.pending, conf.DeliveryTag)
	p.mu.Unlock()
	if c == nil {
		return
	}
	switch {
	case !conf.Ack:
		c.resolve(fmt.Errorf("%w: %s", ErrNacked, c.messageID))
	case c.returned != "":
		c.resolve(fmt.Errorf("%w: %s: %s", ErrUnroutable, c.messageID, c.returned))
	default:
		c.resolve(nil)
	}
}

func (p *Publisher) failPending(reason *amqp.Error) {
	p.mu.Lock()
	p.closed = true
	if reason != nil {
		p.reason = reason
	}
	pending := p.pending
	p.pending = make(map[uint64]*Confirmation)
	p.mu.Unlock()
	for _, c := range pending {
		if reason != nil {
			c.resolve(fmt.Errorf("%w: %s: %v", ErrClosed, c.messageID, reason))
		} else {
			c.resolve(fmt.Errorf("%w: %s", ErrClosed, c.messageID))
		}
	}
}
