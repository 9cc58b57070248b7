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
// idempotent (see Task.IdempotencyKey). Under load, the results of tasks
// of one job that complete together travel in one result batch, and acks
// are combined into multiple-acks where that settles no task early; the
// rule stays the same: a task is acked only once its outcome is confirmed.
//
// A job may also end with a reduce task, which a ReducerFunc registered
// with Reducer runs over the job's task outcomes, read page by page from
// the warren servers over the outcomes RPC; what it returns is the job's
// result (docs/protocol.md, "Reduce tasks").
package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenhq/warren/internal/backoff"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/spans"
	"github.com/warrenhq/warren/protocol"
)

// ErrConnectionLost is wrapped by the Err of EventConnectionLost: a
// broker connection or channel closed under the worker, or the broker
// cancelled one of its consumers (its queue was deleted). Run does not
// return it; it reconnects.
var ErrConnectionLost = errors.New("worker: lost the connection to RabbitMQ")

// Worker consumes warren's work queue and runs the registered handlers.
// Create it with New, register handlers with Handle, then call Run.
type Worker struct {
	cfg    Config
	tracer trace.Tracer
	nodes  *broker.Nodes
	names  protocol.Names
	log    *slog.Logger

	mu       sync.RWMutex
	handlers map[string]handlerSet

	// cancelled holds the jobs cancelled by control broadcasts; it
	// outlives one Run, so a reconnecting worker still skips them.
	cancelled *cancelSet
	// paused holds the jobs and queues paused by control broadcasts,
	// each for protocol.PauseLease after the last one; it outlives one
	// Run, as cancelled does.
	paused *pauseSet

	running atomic.Bool
	// inFlight counts the tasks between EventStarted and EventDone.
	inFlight atomic.Int64
	// runID and startedAt identify the current Run in heartbeats.
	runID     string
	startedAt time.Time

	// testHookBackoff, set only by tests, replaces the reconnect backoff.
	testHookBackoff func(attempt int) time.Duration
	// testHookControl, set only by tests, sees the control queue and its
	// channel once the worker consumes it.
	testHookControl func(queue string, ch *amqp.Channel)
	// testHookResults, set only by tests, sees each result message (or
	// the parts it was cut into) of single task messages once its
	// publish is confirmed or failed: how many tasks it answers, and err.
	testHookResults func(tasks int, err error)
	// outcomesTimeout bounds the wait for each reply of the outcomes
	// RPC: protocol.OutcomesTimeout, shorter in tests.
	outcomesTimeout time.Duration
}

// New returns a Worker for cfg with defaults applied, or a *ConfigError naming
// the first invalid Config field. It does not connect to the broker.
func New(cfg Config) (*Worker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	nodes, err := broker.ParseNodes(cfg.AMQPURL)
	if err != nil {
		return nil, fieldError("AMQPURL", "Config.AMQPURL: %v", err)
	}
	return &Worker{
		cfg:       cfg,
		tracer:    spans.Tracer(cfg.TracerProvider),
		nodes:     nodes,
		names:     protocol.NamesFor(cfg.Prefix),
		log:       cfg.Logger.With("worker", cfg.Name),
		handlers:  make(map[string]handlerSet),
		cancelled: newCancelSet(maxCancelledJobs, cancelledJobTTL, time.Now),
		paused:    newPauseSet(protocol.PauseLease, time.Now),

		outcomesTimeout: protocol.OutcomesTimeout,
	}, nil
}

// Handle registers h for tasks whose AMQP type property is taskType and
// returns w, so calls chain. A task of a type with no handler is not
// failed: it goes back through a retry tier for a worker that serves the
// type (EventUnserved), with a wait that grows, and is dead-lettered with
// protocol.ReasonUnknownType only once it has gone unserved for longer
// than its task timeout; a task message with no type is dead-lettered at
// once. Handle panics if taskType
// is empty, h is nil, or taskType already has a handler. It is safe to
// call while Run is running; the handler serves the tasks received after.
func (w *Worker) Handle(taskType string, h HandlerFunc) *Worker {
	if taskType == "" {
		panic("worker: Handle with an empty task type")
	}
	if h == nil {
		panic(fmt.Sprintf("worker: Handle(%q) with a nil handler", taskType))
	}
	return w.register("Handle", taskType, handlerSet{one: h})
}

// HandleBatch registers h for tasks whose AMQP type property is taskType
// and returns w, so calls chain. h gets all the tasks of a task batch
// message (a job with batch_size above 1) in one call, and a single task
// message as a batch of one; see BatchHandlerFunc. A task type has either
// a HandlerFunc or a BatchHandlerFunc: HandleBatch panics if taskType is
// empty, h is nil, or taskType already has a handler.
func (w *Worker) HandleBatch(taskType string, h BatchHandlerFunc) *Worker {
	if taskType == "" {
		panic("worker: HandleBatch with an empty task type")
	}
	if h == nil {
		panic(fmt.Sprintf("worker: HandleBatch(%q) with a nil handler", taskType))
	}
	return w.register("HandleBatch", taskType, handlerSet{batch: h})
}

// register adds h, a handler or a reducer, to taskType's: a type has at
// most one handler (HandlerFunc or BatchHandlerFunc) and one reducer.
func (w *Worker) register(method, taskType string, h handlerSet) *Worker {
	w.mu.Lock()
	defer w.mu.Unlock()
	have := w.handlers[taskType]
	if h.reduce != nil {
		if have.reduce != nil {
			panic(fmt.Sprintf("worker: %s(%q): the type already has a reducer", method, taskType))
		}
		have.reduce = h.reduce
	} else {
		if have.one != nil || have.batch != nil {
			panic(fmt.Sprintf("worker: %s(%q): the type already has a handler", method, taskType))
		}
		have.one, have.batch = h.one, h.batch
	}
	w.handlers[taskType] = have
	return w
}

// handlerSet is what a task type has registered: at most one of a
// HandlerFunc and a BatchHandlerFunc, for its tasks, and a ReducerFunc,
// for its reduce tasks.
type handlerSet struct {
	one    HandlerFunc
	batch  BatchHandlerFunc
	reduce ReducerFunc
}

// handler returns taskType's handler; ok is false when it has none (it
// may still have a reducer).
func (w *Worker) handler(taskType string) (handlerSet, bool) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	h := w.handlers[taskType]
	return h, h.one != nil || h.batch != nil
}

// reducer returns taskType's reducer; ok is false when it has none.
func (w *Worker) reducer(taskType string) (ReducerFunc, bool) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	r := w.handlers[taskType].reduce
	return r, r != nil
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
// If a broker connection or channel is lost, or the broker cancels the
// task or control consumer, Run stops taking tasks, cancels the running
// handlers' context (the broker redelivers their tasks: a delivery is
// only ever acked on the channel that delivered it), closes both
// connections and reconnects with exponential backoff up to
// Config.ReconnectBackoffMax, declaring the topology and subscribing
// again (EventConnectionLost, then EventReconnected). Given the nodes of
// a cluster, each attempt starts at another node than the one lost and
// tries every node, so a live node is reached on the first attempt. The cancelled jobs
// it has heard of are kept across reconnects.
//
// Run returns an error if it cannot connect the first time, if the broker
// refuses the topology on any connect (a queue exists with other
// arguments, or the user may not declare it), if no handler is
// registered, or if Run is already running on w. It returns nil whenever ctx is done, also
// while it waits to reconnect.
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
	w.runID, w.startedAt = newRunID(), time.Now().UTC()

	tag := consumerTag(w.cfg.Name)
	l, err := w.connect(ctx, tag)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped before it started: nothing was taken
		}
		return err
	}
	w.log.Info("worker: consuming", "queues", strings.Join(w.cfg.Queues, ","), "node", l.node,
		"concurrency", w.cfg.Concurrency, "prefetch", w.cfg.Prefetch)
	w.emit(Event{Kind: EventConnected})
	failed := 0 // reconnect attempts since the last stable connection
	for {
		connectedAt := time.Now()
		lost := w.serve(ctx, l)
		if lost == nil {
			w.log.Info("worker: stopped")
			return nil
		}
		if time.Since(connectedAt) >= w.cfg.ReconnectBackoffMax {
			failed = 0 // else a connection that keeps dropping keeps the backoff growing
		}
		w.log.Warn("worker: lost the connection to RabbitMQ; its unfinished tasks go back to the queue; reconnecting", "node", l.node, "error", lost)
		w.emit(Event{Kind: EventConnectionLost, Err: lost})
		if l, err = w.reconnect(ctx, tag, &failed); l == nil {
			return err
		}
	}
}

// reconnect connects again after a loss, waiting the backoff before each
// attempt; *failed counts the attempts for the backoff. It returns nil
// and nil once ctx is done, and nil and the error when the broker
// refuses the set-up for good.
func (w *Worker) reconnect(ctx context.Context, tag string, failed *int) (*link, error) {
	lostAt := time.Now()
	for attempt := 1; ; attempt++ {
		// The node lost, or the one this attempt could not set up on, is
		// tried last.
		w.nodes.Failover()
		*failed++
		if !backoff.Sleep(ctx, w.backoff(*failed)) {
			w.log.Info("worker: stopped while reconnecting")
			return nil, nil
		}
		l, err := w.connect(ctx, tag)
		switch {
		case ctx.Err() != nil:
			if l != nil {
				l.close()
			}
			w.log.Info("worker: stopped while reconnecting")
			return nil, nil
		case err != nil && fatal(err):
			w.log.Error("worker: the broker refused the worker's set-up; not retrying", "error", err)
			return nil, err
		case err != nil:
			w.log.Debug("worker: reconnect failed", "attempt", attempt, "error", err)
		default:
			w.log.Info("worker: reconnected to RabbitMQ", "node", l.node, "attempts", attempt, "down_for", time.Since(lostAt).Round(time.Millisecond))
			w.emit(Event{Kind: EventReconnected})
			return l, nil
		}
	}
}

// serve runs tasks from l until ctx is done, then drains and returns
// nil, or until l is lost, then returns why. Either way it closes l.
func (w *Worker) serve(ctx context.Context, l *link) error {
	s := newSession(ctx, w, l.pub, l.publisherConn, l.ch, l.consumers)
	defer l.close()
	hb := w.startHeartbeat(l.publisherConn)
	defer hb.stop()
	defer s.cancelHandlers()
	defer s.stopPool() // consume has returned: nothing is sent to the pool any more
	if err := s.consume(l.deliveries, l.gone, l.pub.Done(), l.control.lost); err != nil {
		s.lose(l.close)
		return l.lossReason(err) // after close: the broker's reasons are in
	}
	s.drain(l.ch, l.deliveries)
	hb.goodbye()
	return nil
}

func consumerTag(name string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "warren-worker " + name + " " + hex.EncodeToString(b[:])
}
