package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/outcome"
	"github.com/warrenhq/warren/internal/wire"
)

// abandonAfter is how long Run waits, after cancelling the handlers'
// context, for handlers to return before it requeues their tasks itself
// and stops waiting for them.
const abandonAfter = 2 * time.Second

// session is one connected period of Run, from a connect to the loss of
// the connection or the shutdown: its publisher and consumer, the
// handlers' context and the tasks in flight.
type session struct {
	w   *Worker
	log *slog.Logger
	pub *broker.Publisher
	// rpc is the connection the outcomes RPC of reduce tasks opens its
	// channels on: the publisher's, since the RPC publishes (a blocked
	// connection must not hold up the consumer's acks).
	rpc *amqp.Connection
	// consumers maps each task consumer's tag to its work queue.
	consumers map[string]string

	// stop is Run's context: done means stop taking tasks.
	stop context.Context
	// handlers is the handlers' context, cancelled only when shutdown stops
	// waiting for them or the connection is lost. Publishes use it too, so
	// that a graceful shutdown still publishes the outcomes of the tasks
	// it lets finish.
	handlers       context.Context
	cancelHandlers context.CancelFunc

	slots chan struct{}  // one per running handler: the concurrency bound
	work  chan *delivery // to the pool: Concurrency long-lived goroutines
	wg    sync.WaitGroup

	mu       sync.Mutex
	inflight map[*delivery]struct{}

	publishFailures atomic.Int64 // consecutive ones, for the backoff

	// acks settles every delivery of the task consumers' channel.
	acks *acker
	// results takes the results of single task messages to the result
	// publisher (publishResults), which sends those that finish together
	// in one result batch; resultsQuit stops it.
	results     chan *pendingResult
	resultsQuit chan struct{}

	// lost is set once the connection is lost: from then on no delivery
	// is settled, since its channel is dead or about to be closed, and
	// the broker redelivers every unacked task.
	lost atomic.Bool
}

func newSession(ctx context.Context, w *Worker, pub *broker.Publisher, rpc *amqp.Connection, ch amqp.Acknowledger, consumers map[string]string) *session {
	// The handlers keep ctx's values but not its cancellation.
	handlers, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &session{
		w:              w,
		log:            w.log,
		pub:            pub,
		rpc:            rpc,
		consumers:      consumers,
		stop:           ctx,
		handlers:       handlers,
		cancelHandlers: cancel,
		slots:          make(chan struct{}, w.cfg.Concurrency),
		work:           make(chan *delivery, w.cfg.Concurrency),
		inflight:       make(map[*delivery]struct{}),
		results:        make(chan *pendingResult),
		resultsQuit:    make(chan struct{}),
	}
	s.acks = newAcker(ch, &s.lost)
	go s.publishResults()
	// A pool rather than a goroutine per task: a goroutine's stack grows
	// through the handler and the publish once, not once per task.
	for range w.cfg.Concurrency {
		go s.runPool()
	}
	return s
}

var errControlLost = errors.New("the control consumer's channel closed or the broker cancelled it")

// consume starts a handler for each delivery, at most Concurrency at
// once, until the stop context is done (nil) or a channel or connection
// closes under it (an error).
func (s *session) consume(deliveries <-chan amqp.Delivery, consumerGone, publisherDone, controlLost <-chan struct{}) error {
	for {
		select {
		case <-s.stop.Done():
			return nil
		case <-consumerGone:
			return errors.New("a task consumer's channel closed or the broker cancelled it")
		case <-publisherDone:
			return errors.New("the publisher's channel closed")
		case <-controlLost:
			return errControlLost
		case d, ok := <-deliveries:
			if !ok {
				// Without a close reason it was the broker that cancelled
				// the consumer, for example because the queue was deleted.
				return errors.New("the consumer's channel closed or the broker cancelled the consumer")
			}
			td := s.receive(d)
			if s.stop.Err() != nil {
				s.requeue(td)
				return nil
			}
			select {
			case s.slots <- struct{}{}:
				s.start(td)
			case <-s.stop.Done():
				s.requeue(td)
				return nil
			case <-publisherDone:
				// d stays unacked: closing the channel returns it.
				return errors.New("the publisher's channel closed")
			case <-controlLost:
				return errControlLost
			}
		}
	}
}

// delivery is a task delivery as the session received it: read once,
// there, into msg and its tasks, which is all the rest of the worker
// looks at. It is acked or nacked at most once, by whichever of its
// handler's goroutine and the shutdown gets there first, and never once
// its session lost the connection. It is only ever acked on the channel
// that delivered it, through that channel's acker.
type delivery struct {
	raw  amqp.Delivery // only to settle it, by its tag
	acks *acker        // its channel's
	msg  wire.TaskDelivery
	// tasks are msg's tasks as handlers see them. A message that is not a
	// task has one with only its type and attempt, for logs and events.
	tasks []Task

	settled atomic.Bool
	lost    *atomic.Bool // its session's

	// span is its warren.task.process span, from the start of its
	// processing to its settling (startProcess).
	span trace.Span
}

// receive reads d, the one time a task delivery is decoded.
func (s *session) receive(d amqp.Delivery) *delivery {
	msg := wire.ReadTaskWithin(d, s.w.cfg.MaxMessageBytes)
	if q, ok := s.consumers[d.ConsumerTag]; ok {
		// A retry goes back to the queue the task came from, whatever
		// its x-queue header says.
		msg.Queue = q
	}
	tasks := []Task{{Type: msg.Type, Attempt: msg.Attempt()}}
	if msg.Malformed == nil {
		tasks = make([]Task, len(msg.Tasks))
		var refuse error
		if msg.Reduce {
			refuse = outcome.ErrReduceSpawn
		}
		// One allocation for the delivery's spawns, not one per task.
		spawns := make([]outcome.Spawns, len(msg.Tasks))
		for i, t := range msg.Tasks {
			spawns[i].Init(outcome.MaxSpawnBytes, refuse)
			tasks[i] = Task{JobID: t.JobID, TaskID: t.TaskID, Type: msg.Type, Attempt: msg.Attempt(),
				MaxRetries: msg.MaxRetries, Timeout: msg.Timeout, Payload: t.Payload, spawn: &spawns[i]}
		}
	}
	td := &delivery{raw: d, acks: s.acks, msg: msg, tasks: tasks, lost: &s.lost}
	if s.log.Enabled(context.Background(), slog.LevelDebug) {
		s.log.Debug("worker: delivery", td.logAttrs("redelivered", d.Redelivered, "exchange", d.Exchange, "key", d.RoutingKey, "retries", msg.Retries)...)
	}
	return td
}

// logAttrs are the attributes that name d in a log line (its job, its
// first and last task, its delivery tag and message id), then more.
func (d *delivery) logAttrs(more ...any) []any {
	first, last := d.tasks[0], d.tasks[len(d.tasks)-1]
	return append([]any{"job_id", first.JobID, "task_id", first.TaskID, "last_task", last.TaskID,
		"tag", d.raw.DeliveryTag, "message_id", d.raw.MessageId}, more...)
}

// ack acks d unless it was already settled or its session lost the
// connection; ran says whether it did, or tried.
func (d *delivery) ack() (ran bool, err error) {
	if !d.claim() {
		return false, nil
	}
	return answer(d.acks.ack(d.raw.DeliveryTag))
}

// nack returns d to the queue, on the same conditions as ack.
func (d *delivery) nack() (ran bool, err error) {
	if !d.claim() {
		return false, nil
	}
	return answer(d.acks.nack(d.raw.DeliveryTag))
}

// claim reports whether the caller may settle d, and from then on no one
// else: d was not settled yet and its session did not lose the connection.
func (d *delivery) claim() bool {
	return !d.lost.Load() && d.settled.CompareAndSwap(false, true)
}

// answer is the answer of ack and nack for the acker's err: ran is false
// when the acker sent nothing because the session ended.
func answer(err error) (ran bool, _ error) {
	if errors.Is(err, errSessionLost) || errors.Is(err, errSessionEnded) {
		return false, nil
	}
	return true, err
}

// start hands d to the pool; the caller holds a slot for it, so a pool
// goroutine is free (or about to be) and the send does not block.
func (s *session) start(d *delivery) {
	s.mu.Lock()
	s.inflight[d] = struct{}{}
	s.mu.Unlock()
	s.w.inFlight.Add(int64(len(d.tasks)))
	s.emitEach(d, EventStarted)
	s.wg.Add(1)
	s.work <- d
}

// runPool processes deliveries from the work channel until stopPool.
func (s *session) runPool() {
	for d := range s.work {
		s.process(d)
		s.mu.Lock()
		delete(s.inflight, d)
		s.mu.Unlock()
		s.w.inFlight.Add(-int64(len(d.tasks)))
		s.emitEach(d, EventDone)
		<-s.slots
		s.wg.Done()
	}
}

// emitEach reports an event of kind for each task of d.
func (s *session) emitEach(d *delivery, kind EventKind) {
	if s.w.cfg.OnEvent == nil {
		return
	}
	for _, t := range d.tasks {
		ev := s.event(t)
		ev.Kind = kind
		s.w.emit(ev)
	}
}

// stopPool ends the pool's goroutines once they finish what they run,
// then the result publisher and the acker: a handler that outlived the
// session settles nothing.
func (s *session) stopPool() {
	close(s.work)
	close(s.resultsQuit)
	s.acks.stop()
}

// drain is the graceful shutdown: stop the consumer, requeue what was
// received but not started, and give the running handlers
// ShutdownTimeout to finish before cancelling them.
func (s *session) drain(ch *amqp.Channel, deliveries <-chan amqp.Delivery) {
	var err error
	for tag := range s.consumers {
		if err = ch.Cancel(tag, false); err != nil {
			break
		}
	}
	if err != nil {
		// The channel is closing; its unacked deliveries return to the
		// queue with it.
		s.log.Warn("worker: cancel the consumer", "error", err)
	} else {
		// After basic.cancel-ok the library hands over what it had
		// buffered and closes deliveries.
		for d := range deliveries {
			s.requeue(s.receive(d))
		}
	}
	s.w.emit(Event{Kind: EventDraining})

	if waitGroup(&s.wg, s.w.cfg.ShutdownTimeout) {
		return
	}
	s.log.Warn("worker: handlers still running after the shutdown timeout; cancelling them and requeueing their tasks",
		"in_flight", s.inflightCount(), "shutdown_timeout", s.w.cfg.ShutdownTimeout)
	s.abandon()
}

// lose is the end of a session whose connection was lost: it stops
// settling deliveries, cancels the running handlers (their tasks are
// redelivered whatever they do now), runs closeLink, and gives the
// handlers a moment to return so that the next session's concurrency
// bound holds.
func (s *session) lose(closeLink func()) {
	s.lost.Store(true)
	s.cancelHandlers()
	closeLink()
	if !waitGroup(&s.wg, abandonAfter) {
		s.log.Error("worker: handlers ignore their cancelled context; reconnecting without waiting for them",
			"in_flight", s.inflightCount())
	}
}

// abandon cancels the running handlers, gives them a moment to return,
// and requeues the tasks of those that did not.
func (s *session) abandon() {
	s.cancelHandlers()
	if !waitGroup(&s.wg, abandonAfter) {
		s.log.Error("worker: handlers ignore their cancelled context; requeueing their tasks without waiting for them",
			"in_flight", s.inflightCount())
	}
	s.mu.Lock()
	stuck := make([]*delivery, 0, len(s.inflight))
	for d := range s.inflight {
		stuck = append(stuck, d)
	}
	s.mu.Unlock()
	for _, d := range stuck {
		s.requeue(d)
	}
}

func (s *session) inflightCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.inflight)
}

// requeue nacks d back to the queue, unfinished, for another run.
func (s *session) requeue(d *delivery) {
	ran, err := d.nack()
	if !ran {
		return
	}
	if err != nil {
		// The channel is gone, and the broker requeued d with it.
		s.log.Debug("worker: nack", "error", err)
		return
	}
	s.taskLog(d.tasks[0]).Debug("worker: task requeued by shutdown")
	ev := s.event(d.tasks[0])
	ev.Kind = EventRequeued
	s.w.emit(ev)
}

// waitGroup waits for wg up to timeout and reports whether it finished.
func waitGroup(wg *sync.WaitGroup, timeout time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

func (w *Worker) emit(ev Event) {
	if w.cfg.OnEvent != nil {
		w.cfg.OnEvent(ev)
	}
}
