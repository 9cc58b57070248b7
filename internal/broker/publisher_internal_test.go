package broker

import (
	"context"
	"os"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// Only nacks in a row count toward NackLimit: an ack starts the count
// again.
func TestPublisherCountsNacksInARow(t *testing.T) {
	t.Parallel()
	conn := dialTest(t)
	p, err := NewPublisher(conn, nil)
	require.NoError(t, err)
	defer p.Close()
	nack := amqp.Confirmation{DeliveryTag: 1 << 40, Ack: false} // a tag nothing waits for
	ack := amqp.Confirmation{DeliveryTag: 1 << 40, Ack: true}
	for range NackLimit - 1 {
		p.confirm(nack)
	}
	p.confirm(ack)
	for range NackLimit - 1 {
		p.confirm(nack)
	}
	select {
	case <-p.Done():
		t.Fatal("closed although no NackLimit nacks came in a row")
	case <-time.After(200 * time.Millisecond):
	}
	p.confirm(nack)
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("still open after %d nacks in a row", NackLimit)
	}
}

// dialTest connects to the test broker (TEST_AMQP_URL, else DefaultURL);
// amqptest, which imports this package, cannot serve its own tests.
func dialTest(t *testing.T) *amqp.Connection {
	t.Helper()
	url := os.Getenv("TEST_AMQP_URL")
	if url == "" {
		url = DefaultURL
	}
	conn, err := Dial(context.Background(), url, "warren-test "+t.Name())
	if err != nil {
		t.Fatalf("RabbitMQ is required for this test: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
