// Package broker is warren's RabbitMQ layer: dialling, the topology every
// process declares at start, a confirming publisher and consumer set-up.
// It uses github.com/rabbitmq/amqp091-go and nothing else touches AMQP
// connections directly.
package broker

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// DefaultURL is the broker address used when none is configured.
const DefaultURL = "amqp://guest:guest@127.0.0.1:5672/"

// DialTimeout bounds the TCP connect and the AMQP handshake of Dial, per
// node tried.
const DialTimeout = 10 * time.Second

// Dial opens an AMQP connection named name (shown in the management UI)
// to one of the nodes of rawURLs, a comma-separated list of URLs
// (ParseNodes), trying them as Nodes.Dial does from a node picked at
// random; a single URL is a list of one. It suits a one-off connection:
// a process that reconnects keeps one Nodes instead, so that it leaves a
// lost node for another. Its error is one line that names the nodes
// without their passwords.
func Dial(ctx context.Context, rawURLs, name string) (*amqp.Connection, error) {
	nodes, err := ParseNodes(rawURLs)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to RabbitMQ: %w", err)
	}
	return nodes.Dial(ctx, name)
}

// dialNode connects to the node at rawURL, bounded by ctx and
// DialTimeout.
func dialNode(ctx context.Context, rawURL, name string) (*amqp.Connection, error) {
	ctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(name)
	cfg := amqp.Config{
		Properties: props,
		Heartbeat:  10 * time.Second,
		Locale:     "en_US",
		Dial: func(network, addr string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// The handshake must finish within the same bound.
			if deadline, ok := ctx.Deadline(); ok {
				if err := conn.SetDeadline(deadline); err != nil {
					_ = conn.Close()
					return nil, err
				}
			}
			return conn, nil
		},
	}
	return amqp.DialConfig(rawURL, cfg)
}

// Redact returns rawURL with its password replaced, for logs and errors;
// a comma-separated list of URLs (as ParseNodes reads it) comes back with
// every URL's password replaced. A URL that does not parse is shown as
// "(unparsable URL)", whole.
func Redact(rawURL string) string {
	urls := splitList(rawURL)
	for i, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || u.Scheme == "" || u.Opaque != "" {
			urls[i] = "(unparsable URL)"
			continue
		}
		urls[i] = u.Redacted()
	}
	return strings.Join(urls, ",")
}

// Consume opens a channel on conn with the given prefetch and starts a
// manual-ack consumer on queue. The caller owns the returned channel and
// must ack each delivery on it.
func Consume(conn *amqp.Connection, queue, consumerTag string, prefetch int) (*amqp.Channel, <-chan amqp.Delivery, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, nil, fmt.Errorf("broker: open consumer channel: %w", err)
	}
	if err := ch.Qos(prefetch, 0, false); err != nil {
		_ = ch.Close()
		return nil, nil, fmt.Errorf("broker: set prefetch %d: %w", prefetch, err)
	}
	deliveries, err := ch.Consume(queue, consumerTag, false, false, false, false, nil)
	if err != nil {
		_ = ch.Close()
		return nil, nil, fmt.Errorf("broker: consume %q: %w", queue, err)
	}
	return ch, deliveries, nil
}
