package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenhq/warren/internal/wire"
	"github.com/warrenhq/warren/protocol"
)

// rpcSource reads one reduce run's outcomes over the outcomes RPC: on a
// channel of its own, opened at the first page, that consumes RabbitMQ's
// direct reply-to pseudo-queue and publishes each request to the
// outcomes queue, then waits for the reply with the request's
// correlation id. Pages are read one at a time (a reducer iterates on
// one goroutine, or several in turn).
type rpcSource struct {
	conn       *amqp.Connection
	names      protocol.Names
	jobID      string
	generation int
	timeout    time.Duration
	errorOnce

	mu      sync.Mutex
	ch      *amqp.Channel
	replies <-chan amqp.Delivery
	prefix  string // of its correlation ids: unique to the run
	seq     int
}

// errNoConnection is the failure of a run whose session has no RPC
// connection (only tests build such sessions).
var errNoConnection = errors.New("worker: no connection for the outcomes RPC")

// page asks for the outcomes after after and waits for the reply, up to
// the source's timeout and ctx. A reply with an error is that
// *protocol.OutcomesError; no reply in time, a reply that is neither a
// page nor an error, or a channel that fails, is an error of its own.
func (r *rpcSource) page(ctx context.Context, after int64) ([]protocol.TaskOutcome, *int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.open(); err != nil {
		return nil, nil, err
	}
	r.seq++
	id := r.prefix + strconv.Itoa(r.seq)
	out, err := wire.OutcomesRequest(r.names, protocol.OutcomesRequest{JobID: r.jobID, Generation: r.generation, After: after}, protocol.DirectReplyTo, id)
	if err != nil {
		return nil, nil, err
	}
	if err := r.ch.PublishWithContext(ctx, out.Exchange, out.Key, false, false, out.Msg); err != nil {
		return nil, nil, fmt.Errorf("worker: outcomes RPC: publish the request: %w", err)
	}
	timer := time.NewTimer(r.timeout)
	defer timer.Stop()
	for {
		select {
		case d, ok := <-r.replies:
			if !ok {
				return nil, nil, errors.New("worker: outcomes RPC: the channel closed before the reply")
			}
			if d.CorrelationId != id {
				continue // a late reply to a request of this run that was given up on
			}
			reply, err := wire.ReadOutcomesReply(d, after)
			switch {
			case err != nil:
				return nil, nil, fmt.Errorf("worker: outcomes RPC: a reply that is not one: %w", err)
			case reply.Error != nil:
				return nil, nil, reply.Error
			}
			return reply.Outcomes, reply.Next, nil
		case <-timer.C:
			return nil, nil, fmt.Errorf("worker: outcomes RPC: no reply within %s (is a warren server running?)", r.timeout)
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("worker: outcomes RPC: %w", context.Cause(ctx))
		}
	}
}

// open opens the source's channel and consumes direct reply-to on it,
// the first time; the consume must come before the first publish.
func (r *rpcSource) open() error {
	if r.ch != nil {
		return nil
	}
	if r.conn == nil {
		return errNoConnection
	}
	ch, err := r.conn.Channel()
	if err != nil {
		return fmt.Errorf("worker: outcomes RPC: open a channel: %w", err)
	}
	replies, err := ch.Consume(protocol.DirectReplyTo, "", true, false, false, false, nil)
	if err != nil {
		_ = ch.Close()
		return fmt.Errorf("worker: outcomes RPC: consume %s: %w", protocol.DirectReplyTo, err)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	r.ch, r.replies, r.prefix = ch, replies, hex.EncodeToString(b[:])+"-"
	return nil
}

// close closes the source's channel, if it opened one.
func (r *rpcSource) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ch != nil {
		_ = r.ch.Close()
		r.ch = nil
	}
}
