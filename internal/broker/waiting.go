package broker

import (
	"context"
	"fmt"

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
