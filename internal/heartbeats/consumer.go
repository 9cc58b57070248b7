package heartbeats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenhq/warren/internal/wire"
	"github.com/warrenhq/warren/protocol"
)

// Queue limits of a server's heartbeat queue: a server that stops reading
// (stuck, or slow) must not pile heartbeats up in the broker, and one
// older than a minute says nothing any more.
const (
	queueMaxLength = 10000
	queueTTLMillis = 60000
)

// Consumer feeds a Registry from a queue of its own (exclusive,
// auto-delete, server-named: it lives as long as its connection) bound to
// the heartbeat exchange.
type Consumer struct {
	ch         *amqp.Channel
	deliveries <-chan amqp.Delivery
	reg        *Registry
	log        *slog.Logger
	onApplied  func(protocol.Heartbeat)
	onNew      func(protocol.Heartbeat)
	// warned is when the consumer last logged a dropped heartbeat: at
	// most one such line a minute, whatever a sender does.
	warned time.Time
}

// warn logs a dropped heartbeat, at most once a minute.
func (c *Consumer) warn(msg string, args ...any) {
	if now := time.Now(); now.Sub(c.warned) >= time.Minute {
		c.warned = now
		c.log.Warn(msg, args...)
	}
}

// Config configures a Consumer.
type Config struct {
	// Conn is the connection to consume on; the caller keeps it open.
	Conn *amqp.Connection
	// Exchange is the heartbeat exchange (protocol.Names.HeartbeatExchange).
	Exchange string
	// Registry receives the heartbeats.
	Registry *Registry
	// Logger receives logs; nil means slog.Default().
	Logger *slog.Logger
	// OnApplied, if set, is called after each heartbeat was recorded.
	OnApplied func(protocol.Heartbeat)
	// OnNew, if set, is called after a running heartbeat of a worker id
	// the registry did not hold was recorded: a worker that just
	// connected (or one the registry had dropped as stale).
	OnNew func(protocol.Heartbeat)
}

// NewConsumer declares the heartbeat exchange (a durable fanout, as
// broker.DeclareTopology does) and the consumer's queue, binds it and
// starts consuming; Run then records what arrives.
func NewConsumer(cfg Config) (*Consumer, error) {
	if cfg.Conn == nil || cfg.Registry == nil || cfg.Exchange == "" {
		return nil, errors.New("heartbeats: NewConsumer needs a Conn, an Exchange and a Registry")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ch, err := cfg.Conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("heartbeats: open a channel: %w", err)
	}
	err = ch.ExchangeDeclare(cfg.Exchange, amqp.ExchangeFanout, true, false, false, false, nil)
	var q amqp.Queue
	if err == nil {
		q, err = ch.QueueDeclare("", false, true, true, false, amqp.Table{
			amqp.QueueTypeArg: amqp.QueueTypeClassic, "x-max-length": int32(queueMaxLength), "x-message-ttl": int32(queueTTLMillis),
		})
	}
	if err == nil {
		err = ch.QueueBind(q.Name, "", cfg.Exchange, false, nil)
	}
	var deliveries <-chan amqp.Delivery
	if err == nil {
		deliveries, err = ch.Consume(q.Name, "", true, true, false, false, nil)
	}
	if err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("heartbeats: subscribe to %q: %w", cfg.Exchange, err)
	}
	return &Consumer{ch: ch, deliveries: deliveries, reg: cfg.Registry, log: cfg.Logger, onApplied: cfg.OnApplied, onNew: cfg.OnNew}, nil
}

// Run records heartbeats until ctx is done (nil) or the channel closes
// (an error: the caller reconnects). A malformed heartbeat is logged and
// dropped.
func (c *Consumer) Run(ctx context.Context) error {
	defer func() { _ = c.ch.Close() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-c.deliveries:
			if !ok {
				return errors.New("heartbeats: the consumer's channel closed")
			}
			h, err := wire.ReadHeartbeat(d)
			if err != nil {
				c.warn("heartbeats: dropping a malformed heartbeat (one line a minute at most)", "error", err)
				continue
			}
			// UserId is set only by a publisher that chose to, and then
			// RabbitMQ checked it against the connection's user: it is
			// who published, or "" for a publisher that did not say.
			known := c.reg.Known(h.ID)
			if !c.reg.ApplyFrom(h, d.UserId) {
				c.warn("heartbeats: ignoring a heartbeat: the list of workers is full, or its id belongs to another broker user "+
					"(one line a minute at most)", "worker_id", h.ID, "name", h.Name, "user_id", d.UserId)
				continue
			}
			if c.onApplied != nil {
				c.onApplied(h)
			}
			if c.onNew != nil && !known && h.State == protocol.HeartbeatRunning {
				c.onNew(h)
			}
		}
	}
}
