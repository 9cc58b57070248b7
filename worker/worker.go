// Package worker runs warren task handlers. A user's worker binary
// registers one HandlerFunc per task type and calls Run:
//
//	w, err := worker.New(worker.Config{Concurrency: 16})
//	w.Handle("thumbnail", thumbnail)
//	err = w.Run(ctx) // until ctx is done; drains in-flight tasks first
//
// For every task it takes from the work queue, the worker runs the handler
// and publishes the outcome (a result, a retry, or a dead letter), waits for
// the broker to confirm it, and only then acks the task. If the outcome
// cannot be published the task goes back to the queue and runs again, so a
// task is never lost; it may run more than once, and handlers should be
// idempotent (see Task.IdempotencyKey).
package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenhq/warren/broker"
	"github.com/warrenhq/warren/protocol"
)

// ErrConnectionLost is wrapped by Run's error when a broker connection or
// channel closed under the worker, or the broker cancelled its consumer
// (the queue was deleted). The unfinished tasks go back to the queue;
// calling Run again reconnects.
var ErrConnectionLost = errors.New("worker: lost the connection to RabbitMQ")

// Worker consumes warren's work queue and runs the registered handlers.
// Create it with New, register handlers with Handle, then call Run.
type Worker struct {
	cfg   Config
	names protocol.Names
	log   *slog.Logger

	mu       sync.RWMutex
	handlers map[string]HandlerFunc

	// cancelled holds the jobs cancelled by control broadcasts; it
	// outlives one Run, so a reconnecting worker still skips them.
	cancelled *cancelSet

	running atomic.Bool

	// testHookControl, set only by tests, sees the control queue and its
	// channel once the worker consumes it.
	testHookControl func(queue string, ch *amqp.Channel)
}

// New returns a Worker for cfg with defaults applied, or an error naming
// the first invalid Config field. It does not connect to the broker.
func New(cfg Config) (*Worker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Worker{
		cfg:       cfg,
		names:     protocol.NamesFor(cfg.Prefix),
		log:       cfg.Logger.With("worker", cfg.Name),
		handlers:  make(map[string]HandlerFunc),
		cancelled: newCancelSet(maxCancelledJobs, cancelledJobTTL, time.Now),
	}, nil
}

// Handle registers h for tasks whose AMQP type property is taskType and
// returns w, so calls chain. Tasks of a type with no handler are
// dead-lettered with protocol.ReasonUnknownType. Handle panics if taskType
// is empty, h is nil, or taskType already has a handler. It is safe to
// call while Run is running; the handler serves the tasks received after.
func (w *Worker) Handle(taskType string, h HandlerFunc) *Worker {
	if taskType == "" {
		panic("worker: Handle with an empty task type")
	}
	if h == nil {
		panic(fmt.Sprintf("worker: Handle(%q) with a nil handler", taskType))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, dup := w.handlers[taskType]; dup {
		panic(fmt.Sprintf("worker: Handle(%q) called twice", taskType))
	}
	w.handlers[taskType] = h
	return w
}

func (w *Worker) handler(taskType string) HandlerFunc {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.handlers[taskType]
}

// Run connects to the broker, declares warren's topology, listens to the
// control exchange, and runs tasks from the work queue until ctx is done.
// Tasks of jobs cancelled by a control broadcast are acked without
// running (EventSkipped). Once ctx is done it stops taking tasks, returns
// the ones it had not started to the queue, and waits up to
// Config.ShutdownTimeout for the running handlers to finish and their
// outcomes to be published and acked; handlers still running after that
// have their context cancelled and their tasks are returned to the queue.
// It returns nil after such a shutdown.
//
// Run returns an error wrapping ErrConnectionLost if the broker connection
// is lost or its task or control consumer ends (it does not reconnect),
// and an error if it cannot connect, no handler is registered, or Run is
// already running on w.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.RLock()
	n := len(w.handlers)
	w.mu.RUnlock()
	if n == 0 {
		return errNoHandlers
	}
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("worker: Run is already running on this Worker")
	}
	defer w.running.Store(false)

	consumerConn, err := broker.Dial(ctx, w.cfg.AMQPURL, "warren worker "+w.cfg.Name+" (consumer)")
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped before it started: nothing was taken
		}
		return fmt.Errorf("worker: %w", err)
	}
	defer func() { _ = consumerConn.Close() }()
	topology := &broker.TopologyOptions{DeliveryLimit: w.cfg.DeliveryLimit, RetryTiers: w.cfg.RetryTiers}
	if err := broker.DeclareTopology(consumerConn, w.names, topology); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	// Outcomes are published on a connection of their own: when RabbitMQ
	// blocks publishers (a memory or disk alarm) it blocks their whole
	// connection, and the consumer must still be able to ack and nack.
	publisherConn, err := broker.Dial(ctx, w.cfg.AMQPURL, "warren worker "+w.cfg.Name+" (publisher)")
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped before it started: nothing was taken
		}
		return fmt.Errorf("worker: %w", err)
	}
	defer func() { _ = publisherConn.Close() }()
	publisherLost := publisherConn.NotifyClose(make(chan *amqp.Error, 1))
	pub, err := broker.NewPublisher(publisherConn, nil)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer func() { _ = pub.Close() }()

	tag := consumerTag(w.cfg.Name)
	// Cancels are heard before the first task is taken.
	control, err := w.consumeControl(consumerConn, tag+" control")
	if err != nil {
		return err
	}
	go control.run(w)
	defer control.close()

	ch, deliveries, err := broker.Consume(consumerConn, w.names.TasksQueue, tag, w.cfg.Prefetch)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer func() { _ = ch.Close() }()
	consumerLost := ch.NotifyClose(make(chan *amqp.Error, 1))

	s := newSession(ctx, w, pub, tag)
	defer s.cancelHandlers()
	w.log.Info("worker: consuming", "queue", w.names.TasksQueue,
		"concurrency", w.cfg.Concurrency, "prefetch", w.cfg.Prefetch)

	if err := s.consume(deliveries, pub.Done(), control.lost); err != nil {
		err = fmt.Errorf("%w: %v", ErrConnectionLost, closeReason(err, consumerLost, control.closes, publisherLost))
		w.log.Error("worker: stopped", "error", err)
		s.abandon()
		return err
	}
	s.drain(ch, deliveries)
	w.log.Info("worker: stopped")
	return nil
}

// closeReason adds the broker's reason for closing a channel or
// connection, if it gave one, to err.
func closeReason(err error, closes ...<-chan *amqp.Error) string {
	for _, c := range closes {
		select {
		case reason, ok := <-c:
			if ok && reason != nil {
				return fmt.Sprintf("%v: %v", err, reason)
			}
		default:
		}
	}
	return err.Error()
}

func consumerTag(name string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "warren-worker " + name + " " + hex.EncodeToString(b[:])
}
