package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/protocol"
)

// ceiling runs n tasks through the broker without warren: a confirmed
// persistent publish per task, workers consumers (each on its own
// connection and channel, prefetch) that publish a confirmed persistent
// result and then ack the task, and one collector that acks the results.
// It returns the time from the first publish to the last result collected.
func ceiling(ctx context.Context, amqpURL string, names protocol.Names, n, workers, prefetch int) (_ time.Duration, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var conns []*amqp.Connection
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	dial := func(name string) (*amqp.Connection, error) {
		c, err := broker.Dial(ctx, amqpURL, "warren bench ("+name+") "+names.Prefix)
		if err == nil {
			conns = append(conns, c)
		}
		return c, err
	}
	ctl, err := dial("ceiling control")
	if err != nil {
		return 0, err
	}
	if err := broker.DeclareTopology(ctl, names, nil); err != nil {
		return 0, err
	}
	// Leftovers of an earlier trial (there should be none) would skew it.
	if ch, err := ctl.Channel(); err == nil {
		for _, q := range []string{names.TasksQueue, names.ResultsQueue} {
			_, _ = ch.QueuePurge(q, false)
		}
		_ = ch.Close()
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	errc := make(chan error, workers+2)
	fail := func(err error) {
		select {
		case errc <- err:
		default:
		}
		cancel()
	}

	// Collector.
	colConn, err := dial("ceiling collector")
	if err != nil {
		return 0, err
	}
	colCh, results, err := broker.Consume(colConn, names.ResultsQueue, "", 1000)
	if err != nil {
		return 0, err
	}
	done := make(chan time.Time, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		got, unacked := 0, 0
		for {
			select {
			case <-ctx.Done():
				return
			case d, ok := <-results:
				if !ok {
					fail(errors.New("collector: deliveries closed"))
					return
				}
				got++
				unacked++
				if unacked >= 100 || got == n {
					if err := colCh.Ack(d.DeliveryTag, true); err != nil {
						fail(fmt.Errorf("collector ack: %w", err))
						return
					}
					unacked = 0
				}
				if got == n {
					done <- time.Now()
					return
				}
			}
		}
	}()

	// Consumers.
	for i := range workers {
		conn, err := dial(fmt.Sprintf("ceiling consumer %d", i))
		if err != nil {
			return 0, err
		}
		pub, err := broker.NewPublisher(conn, &broker.PublisherOptions{Window: max(prefetch, 1)})
		if err != nil {
			return 0, err
		}
		ch, tasks, err := broker.Consume(conn, names.TasksQueue, "", prefetch)
		if err != nil {
			_ = pub.Close()
			return 0, err
		}
		type pending struct {
			c   *broker.Confirmation
			tag uint64
		}
		inflight := make(chan pending, prefetch)
		wg.Add(2)
		go func() { // publish a result per task
			defer wg.Done()
			defer close(inflight)
			for {
				select {
				case <-ctx.Done():
					return
				case d, ok := <-tasks:
					if !ok {
						return
					}
					c, err := pub.Publish(ctx, names.ResultsExchange, protocol.RoutingKeyResult, amqp.Publishing{
						MessageId: d.MessageId, DeliveryMode: amqp.Persistent, ContentType: "application/json",
						Body: []byte(`{"ok":true}`),
					})
					if err != nil {
						if ctx.Err() == nil {
							fail(fmt.Errorf("consumer publish: %w", err))
						}
						return
					}
					select {
					case inflight <- pending{c, d.DeliveryTag}:
					case <-ctx.Done():
						return
					}
				}
			}
		}()
		go func() { // ack each task once its result is confirmed
			defer wg.Done()
			defer pub.Close()
			for p := range inflight {
				if err := p.c.Wait(ctx); err != nil {
					if ctx.Err() == nil {
						fail(fmt.Errorf("consumer confirm: %w", err))
					}
					return
				}
				if err := ch.Ack(p.tag, false); err != nil {
					if ctx.Err() == nil {
						fail(fmt.Errorf("consumer ack: %w", err))
					}
					return
				}
			}
		}()
	}

	// Publisher of the tasks, pipelined within the confirm window.
	pubConn, err := dial("ceiling publisher")
	if err != nil {
		return 0, err
	}
	pub, err := broker.NewPublisher(pubConn, &broker.PublisherOptions{Window: broker.DefaultConfirmWindow})
	if err != nil {
		return 0, err
	}
	defer pub.Close()
	confirms := make(chan *broker.Confirmation, broker.DefaultConfirmWindow)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for c := range confirms {
			if err := c.Wait(ctx); err != nil {
				if ctx.Err() == nil {
					fail(fmt.Errorf("task confirm: %w", err))
				}
				return
			}
		}
	}()
	start := time.Now()
	body := make([]byte, 0, 64)
	func() {
		defer close(confirms)
		for i := range n {
			body = strconv.AppendInt(append(body[:0], `{"i":`...), int64(i), 10)
			body = append(body, '}')
			c, err := pub.Publish(ctx, names.JobsExchange, protocol.RoutingKeyTask, amqp.Publishing{
				MessageId: strconv.Itoa(i), DeliveryMode: amqp.Persistent, ContentType: "application/json",
				Body: append([]byte(nil), body...),
			})
			if err != nil {
				if ctx.Err() == nil {
					fail(fmt.Errorf("task publish: %w", err))
				}
				return
			}
			select {
			case confirms <- c:
			case <-ctx.Done():
				return
			}
		}
	}()
	select {
	case end := <-done:
		return end.Sub(start), nil
	case err := <-errc:
		return 0, err
	case <-ctx.Done():
		select {
		case err := <-errc:
			return 0, err
		default:
		}
		return 0, ctx.Err()
	}
}
