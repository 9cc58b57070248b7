// Package amqptest gives tests a real RabbitMQ connection and a topology of
// their own under a unique prefix, deleted when the test ends, so tests
// share one broker and run in parallel.
package amqptest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
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

// DeleteWorkQueuesAtEnd deletes, when the test ends, the queues per type
// that a server of names declares for jobs of workQueues (each work queue
// and its retry tiers, the defaults and tiers): Topology's cleanup knows
// only the fixed queues. Call it before the server starts, so that it
// runs after the server stops. Queues that were never declared are
// skipped.
func DeleteWorkQueuesAtEnd(t testing.TB, names protocol.Names, workQueues []string, tiers ...time.Duration) {
	t.Helper()
	t.Cleanup(func() {
		c, err := broker.Dial(context.Background(), URL(), "warren-test-cleanup")
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer func() { _ = c.Close() }()
		fixed := broker.InstallationQueues(names, nil, tiers...)
		for _, q := range broker.InstallationQueues(names, workQueues, tiers...) {
			if slices.Contains(fixed, q) {
				continue // Topology's
			}
			ch, err := c.Channel()
			if err != nil {
				t.Errorf("cleanup: %v", err)
				return
			}
			// A passive declare first: deleting a queue that does not
			// exist is not an error on every RabbitMQ version alike.
			if _, err := ch.QueueDeclarePassive(q, true, false, false, false, nil); err != nil {
				if !broker.IsNotFound(err) {
					t.Errorf("cleanup: %s: %v", q, err)
				}
				continue // the channel is closed
			}
			if _, err := ch.QueueDelete(q, false, false, false); err != nil {
				t.Errorf("cleanup: delete %s: %v", q, err)
			}
			_ = ch.Close()
		}
	})
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

// RabbitMQ4DeliveryLimit makes queue count deliveries as RabbitMQ 4.0 and
// later do, on a broker older than that: from 4.0, a quorum queue declared
// without x-delivery-limit gets the limit 20, and a message returned more
// often than that is dropped (or dead-lettered, if the queue has a
// target), while 3.x has no default limit. On a 3.x broker, for a queue
// declared without x-delivery-limit, it sets that limit with a policy
// (rabbitmqctl set_policy), cleared when the test ends. On RabbitMQ 4 or
// later, or for a queue declared with a delivery limit, it does nothing:
// the broker's own rule applies. It skips the test when it needs
// rabbitmqctl and cannot run it.
func RabbitMQ4DeliveryLimit(t testing.TB, conn *amqp.Connection, queue string) {
	t.Helper()
	if version, _ := conn.Properties["version"].(string); !strings.HasPrefix(version, "3.") {
		return
	}
	uri, err := amqp.ParseURI(URL())
	if err != nil {
		t.Fatal(err)
	}
	args, err := queueArguments(uri.Vhost, queue)
	if err != nil {
		t.Skipf("RabbitMQ 3.x has no default delivery limit, and rabbitmqctl, needed to give %s RabbitMQ 4's, failed: %v", queue, err)
	}
	if _, ok := args["x-delivery-limit"]; ok {
		return
	}
	pattern := "^" + regexp.QuoteMeta(queue) + "$"
	if _, err := rabbitmqctl("set_policy", "-p", uri.Vhost, "--apply-to", "queues", "--priority", "1000",
		queue, pattern, `{"delivery-limit":20}`); err != nil {
		t.Fatalf("give %s RabbitMQ 4's default delivery limit: %v", queue, err)
	}
	t.Cleanup(func() {
		if _, err := rabbitmqctl("clear_policy", "-p", uri.Vhost, queue); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
}

// QueueArguments returns the arguments each of queues was declared with
// on the test broker, as rabbitmqctl lists them (numbers as float64),
// by queue. It fails the test when rabbitmqctl cannot list them or does
// not list one of the queues.
func QueueArguments(t testing.TB, queues ...string) map[string]map[string]any {
	t.Helper()
	uri, err := amqp.ParseURI(URL())
	if err != nil {
		t.Fatal(err)
	}
	all, err := listQueueArguments(uri.Vhost)
	if err != nil {
		t.Fatalf("rabbitmqctl (installed with rabbitmq-server) lists queue arguments: %v", err)
	}
	out := make(map[string]map[string]any, len(queues))
	for _, q := range queues {
		args, ok := all[q]
		if !ok {
			t.Fatalf("rabbitmqctl does not list queue %q", q)
		}
		out[q] = args
	}
	return out
}

// queueArguments returns the arguments queue was declared with, as
// rabbitmqctl lists them.
func queueArguments(vhost, queue string) (map[string]any, error) {
	all, err := listQueueArguments(vhost)
	if err != nil {
		return nil, err
	}
	args, ok := all[queue]
	if !ok {
		return nil, fmt.Errorf("rabbitmqctl does not list queue %q", queue)
	}
	return args, nil
}

// listQueueArguments returns the arguments of every queue of vhost, by
// queue, as rabbitmqctl lists them.
func listQueueArguments(vhost string) (map[string]map[string]any, error) {
	out, err := rabbitmqctl("list_queues", "-p", vhost, "name", "arguments", "--formatter", "json")
	if err != nil {
		return nil, err
	}
	var queues []struct {
		Name      string  `json:"name"`
		Arguments [][]any `json:"arguments"` // [name, type, value]
	}
	if err := json.Unmarshal(out, &queues); err != nil {
		return nil, fmt.Errorf("rabbitmqctl list_queues: %w", err)
	}
	all := make(map[string]map[string]any, len(queues))
	for _, q := range queues {
		args := make(map[string]any, len(q.Arguments))
		for _, a := range q.Arguments {
			if len(a) == 3 {
				if name, ok := a[0].(string); ok {
					args[name] = a[2]
				}
			}
		}
		all[q.Name] = args
	}
	return all, nil
}

func rabbitmqctl(args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", append([]string{"-q"}, args...)...).Output()
	if err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			return nil, fmt.Errorf("rabbitmqctl %s: %w: %s", args[0], err, bytes.TrimSpace(exitErr.Stderr))
		}
		return nil, fmt.Errorf("rabbitmqctl %s: %w", args[0], err)
	}
	return out, nil
}
