// Package amqptest gives tests a real RabbitMQ connection and a topology of
// their own under a unique prefix, deleted when the test ends, so tests
// share one broker and run in parallel.
package amqptest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/protocol"
)

// URL is the broker tests use: TEST_AMQP_URL, else broker.DefaultURL.
func URL() string {
	if u := os.Getenv("TEST_AMQP_URL"); u != "" {
		return u
	}
	return broker.DefaultURL
}

// Prefix returns a fresh WARREN_PREFIX for one test, such as
// "wt-3f9a1c2e.".
func Prefix(t testing.TB) string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	if len(name) > 40 {
		name = name[:40]
	}
	return "wt-" + hex.EncodeToString(b[:]) + "-" + name + "."
}

// Dial connects to the test broker and closes the connection when the
// test ends.
func Dial(t testing.TB) *amqp.Connection {
	t.Helper()
	conn, err := broker.Dial(context.Background(), URL(), "warren-test "+t.Name())
	if err != nil {
		t.Fatalf("RabbitMQ is required for this test: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// Topology declares warren's topology under a fresh prefix and deletes it
// when the test ends, retry tiers included (those of opts and the
// defaults; a test whose workers declare other tiers must pass them in
// opts). It returns the names and an admin connection.
func Topology(t testing.TB, opts *broker.TopologyOptions) (protocol.Names, *amqp.Connection) {
	t.Helper()
	names := protocol.NamesFor(Prefix(t))
	conn := Dial(t)
	if err := broker.DeclareTopology(conn, names, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := broker.Dial(context.Background(), URL(), "warren-test-cleanup")
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer func() { _ = c.Close() }()
		var tiers []time.Duration
		if opts != nil {
			tiers = opts.RetryTiers
		}
		if err := broker.DeleteTopology(c, names, tiers...); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return names, conn
}

// QueueDepth returns the number of ready messages in queue.
func QueueDepth(t testing.TB, conn *amqp.Connection, queue string) int {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ch.Close() }()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("inspect queue %q: %v", queue, err)
	}
	return q.Messages
}
