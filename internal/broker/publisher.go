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
	// the message was confirmed; it may or may not have been stored. When
	// the broker closed it, the error also wraps the broker's *amqp.Error.
	ErrClosed = errors.New("broker: publisher closed before confirmation")
	// ErrRefused means the broker closed the channel with
	// PRECONDITION_FAILED (406) while the message was unconfirmed on it:
	// RabbitMQ does that to a channel that sends a message it refuses, one
	// whose body is over its max_message_size for instance. The refused
	// message is one of those unconfirmed on the channel, not necessarily
	// this one; PublishAlone tells which. An error that wraps ErrRefused
	// also wraps ErrClosed.
	ErrRefused = errors.New("broker: channel closed by the broker over a refused message")
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

// NackLimit is how many publishes in a row to one exchange and routing
// key the broker may nack before a Publisher closes its channel, as if
// the broker had closed it, so that its owner connects again (see
// Publisher). A channel of RabbitMQ (seen on 3.10) whose first publish to
// a quorum queue came while the queue had no leader, during the election
// that follows the loss of its leader's node, nacks every later publish
// to that queue for as long as it lives, while a new channel publishes
// to it at once; its publishes to other queues go on being confirmed, so
// they do not start the count again.
const NackLimit = 3

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
// the broker also acks them. When the broker nacks NackLimit publishes in
// a row to one exchange and routing key, the Publisher closes its
// channel: Done is closed and its unconfirmed publishes fail with
// ErrClosed, as when the broker closes it, and its owner reconnects. It
// is safe for concurrent use.
type Publisher struct {
	conn    *amqp.Connection // for PublishAlone's channels
	ch      *amqp.Channel
	window  chan struct{}
	blocked *blockState
	log     *slog.Logger

	nackClose sync.Once // closes the channel after NackLimit nacks in a row to one place

	pubMu sync.Mutex // serialises publishes so delivery tags are known

	mu      sync.Mutex // guards the fields below; held only for map work
	pending map[uint64]*Confirmation
	closed  bool
	reason  *amqp.Error    // why the channel closed, when the broker closed it
	nacks   map[string]int // per exchange and routing key: nacks since the last ack

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

	// deferred is the library's record of the broker's answer for this
	// publish, set by Publish once the library has sent it, under the
	// publisher's mu; heard says the listener heard the answer before
	// that, and leaves the outcome to Publish (see Publisher.confirm).
	deferred *amqp.DeferredConfirmation
	heard    bool
	notice   bool // the listener's notice said acked (when heard)
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
	p, err := openPublisher(conn, window, newBlockState(blockedWait, log))
	if err != nil {
		return nil, err
	}
	go p.blocked.follow(conn.NotifyBlocked(make(chan amqp.Blocking, 4)))
	return p, nil
}

// openPublisher opens a confirm-mode channel on conn and starts its
// listener; blocked is the connection's block state, which the caller
// keeps up to date.
func openPublisher(conn *amqp.Connection, window int, blocked *blockState) (*Publisher, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("broker: open publisher channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("broker: enable publisher confirms: %w", err)
	}
	p := &Publisher{
		conn:    conn,
		ch:      ch,
		blocked: blocked,
		log:     blocked.log,
		window:  make(chan struct{}, window),
		pending: make(map[uint64]*Confirmation),
		nacks:   make(map[string]int),
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

	deferred, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, msg)
	if err != nil {
		p.mu.Lock()
		delete(p.pending, c.tag)
		p.mu.Unlock()
		release()
		if errors.Is(err, amqp.ErrClosed) {
			// The channel closed before the listener heard of it.
			return nil, fmt.Errorf("%w: %s: %w", ErrClosed, msg.MessageId, err)
		}
		return nil, fmt.Errorf("broker: publish %s to %q/%q: %w", msg.MessageId, exchange, key, err)
	}
	p.mu.Lock()
	c.deferred = deferred
	heard, notice := c.heard, c.notice
	p.mu.Unlock()
	if heard {
		// The broker answered before the library returned: the listener
		// left the outcome to us.
		p.settle(c, notice)
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

// PublishAlone publishes msg as PublishAndWait does, but on a channel of
// its own, opened on the publisher's connection for this message and
// closed after its confirm. A message the broker refuses by closing its
// channel (one over its max_message_size) then costs only that channel:
// the publisher's own channel, and the messages waiting for their
// confirms on it, are not affected, and an error wrapping ErrRefused is
// about msg and nothing else. It costs a channel per call: it is meant
// for the few messages that may be refused.
func (p *Publisher) PublishAlone(ctx context.Context, exchange, key string, msg amqp.Publishing) error {
	alone, err := openPublisher(p.conn, 1, p.blocked)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrClosed, msg.MessageId, err)
	}
	defer func() { _ = alone.Close() }()
	return alone.PublishAndWait(ctx, exchange, key, msg)
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

// closedErr is the error of a publish attempted after the channel closed:
// the message was never sent, so it cannot have been refused.
func (p *Publisher) closedErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return &closedError{reason: p.reason}
}

// closedError is the error of a publish whose channel closed before its
// confirm: ErrClosed, ErrRefused when the broker closed the channel with
// PRECONDITION_FAILED while the message was out, and the broker's
// *amqp.Error when it was the broker that closed it.
type closedError struct {
	messageID string      // "" when the message was never sent
	reason    *amqp.Error // nil when the client closed the channel
}

func (e *closedError) Error() string {
	msg := ErrClosed.Error()
	if e.refused() {
		msg = ErrRefused.Error()
	}
	if e.messageID != "" {
		msg += ": " + e.messageID
	}
	if e.reason != nil {
		msg += ": " + e.reason.Error()
	}
	return msg
}

func (e *closedError) refused() bool {
	return e.messageID != "" && e.reason != nil && e.reason.Code == amqp.PreconditionFailed
}

// Is makes errors.Is see ErrClosed, and ErrRefused when it applies.
func (e *closedError) Is(target error) bool {
	return target == ErrClosed || (target == ErrRefused && e.refused())
}

// Unwrap returns the broker's error, for errors.As, or nil.
func (e *closedError) Unwrap() error {
	if e.reason == nil {
		return nil
	}
	return e.reason
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

// confirm is the listener's part of a publish's answer: the library's
// notice, in publish order, that the broker answered it. The answer
// itself is read from the publish's DeferredConfirmation, never from the
// notice: amqp091-go (seen in v1.16.0) notifies a publish the broker
// nacked as acked when the nack came before the answers of earlier
// publishes and a multiple-ack of a later tag follows, which RabbitMQ
// sends (a publish to a queue that refuses it is nacked at once, while
// a quorum queue confirms after replication), and AMQP says such an ack
// leaves the nacked tag out. The DeferredConfirmation keeps the nack. It
// is set before the notice is sent; when Publish has not stored it yet,
// Publish settles the outcome instead (the listener must not wait for
// Publish, which may wait for the library's reader, which waits for the
// listener).
func (p *Publisher) confirm(conf amqp.Confirmation) {
	p.mu.Lock()
	c := p.pending[conf.DeliveryTag]
	delete(p.pending, conf.DeliveryTag)
	if c != nil && c.deferred == nil {
		c.heard, c.notice = true, conf.Ack
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	if c == nil {
		// No publish waits for it: only the count of nacks in a row
		// learns from it.
		p.count("", "", conf.Ack)
		return
	}
	p.settle(c, conf.Ack)
}

// settle resolves c, whose answer the broker gave, from its
// DeferredConfirmation and a return recorded for it, and counts its nack
// toward NackLimit; notice is what the library's notice said.
func (p *Publisher) settle(c *Confirmation, notice bool) {
	acked := c.deferred.Acked()
	if notice != acked {
		p.log.Debug("broker: the client library notified a publish as acked or nacked against the broker's answer; the answer counts",
			"message_id", c.messageID, "acked", acked)
	}
	p.count(c.exchange, c.key, acked)
	p.mu.Lock()
	returned := c.returned
	p.mu.Unlock()
	switch {
	case !acked:
		c.resolve(fmt.Errorf("%w: %s", ErrNacked, c.messageID))
	case returned != "":
		c.resolve(fmt.Errorf("%w: %s: %s", ErrUnroutable, c.messageID, returned))
	default:
		c.resolve(nil)
	}
}

// count counts an answer of the broker to a publish to exchange with
// key toward NackLimit: a nack adds one to the count of that exchange and
// key, an ack starts it again from none.
func (p *Publisher) count(exchange, key string, acked bool) {
	dest := exchange + "\x00" + key
	p.mu.Lock()
	if acked {
		delete(p.nacks, dest)
	} else {
		p.nacks[dest]++
	}
	nacks := p.nacks[dest]
	p.mu.Unlock()
	if nacks >= NackLimit {
		p.closeAfterNacks(exchange, key, nacks)
	}
}

// closeAfterNacks closes the channel once, in the background: the
// listener calls it, and must go on reading confirms until the channel
// has closed.
func (p *Publisher) closeAfterNacks(exchange, key string, nacks int) {
	p.nackClose.Do(func() {
		p.log.Warn("broker: the broker nacked publishes in a row on this channel; closing it to publish on a new one",
			"nacks", nacks, "exchange", exchange, "routing_key", key)
		go func() { _ = p.ch.Close() }()
	})
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
		c.resolve(&closedError{messageID: c.messageID, reason: reason})
	}
}
