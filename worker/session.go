package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/protocol"
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
	tag string // consumer tag

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

	// lost is set once the connection is lost: from then on no delivery
	// is settled, since its channel is dead or about to be closed, and
	// the broker redelivers every unacked task.
	lost atomic.Bool
}

func newSession(ctx context.Context, w *Worker, pub *broker.Publisher, tag string) *session {
	// The handlers keep ctx's values but not its cancellation.
	handlers, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &session{
		w:              w,
		log:            w.log,
		pub:            pub,
		tag:            tag,
		stop:           ctx,
		handlers:       handlers,
		cancelHandlers: cancel,
		slots:          make(chan struct{}, w.cfg.Concurrency),
		work:           make(chan *delivery, w.cfg.Concurrency),
		inflight:       make(map[*delivery]struct{}),
	}
	// A pool rather than a goroutine per task: a goroutine's stack grows
	// through the handler and the publish once, not once per task.
	for range w.cfg.Concurrency {
		go s.runPool()
	}
	return s
}

// runPool processes deliveries from the work channel until stopPool.
func (s *session) runPool() {
	for d := range s.work {
		s.process(d)
		s.mu.Lock()
		delete(s.inflight, d)
		s.mu.Unlock()
		<-s.slots
		s.wg.Done()
	}
}

// stopPool ends the pool's goroutines once they finish what they run.
func (s *session) stopPool() { close(s.work) }

var errControlLost = errors.New("the control consumer's channel closed or the broker cancelled it")

// delivery is a task delivery that is acked or nacked at most once, by
// whichever of its handler's goroutine and the shutdown gets there first,
// and never once its session lost the connection. It is only ever acked
// on the channel that delivered it (its Acknowledger).
type delivery struct {
	amqp.Delivery
	settled atomic.Bool
	lost    *atomic.Bool // its session's
}

func (s *session) delivery(d amqp.Delivery) *delivery {
	return &delivery{Delivery: d, lost: &s.lost}
}

// settle runs ack or nack f unless d was already settled or its session
// lost the connection; it reports whether f ran.
func (d *delivery) settle(f func() error) (bool, error) {
	if d.lost.Load() || !d.settled.CompareAndSwap(false, true) {
		return false, nil
	}
	return true, f()
}

// consume starts a handler for each delivery, at most Concurrency at
// once, until the stop context is done (nil) or a channel or connection
// closes under it (an error).
func (s *session) consume(deliveries <-chan amqp.Delivery, publisherDone, controlLost <-chan struct{}) error {
	for {
		select {
		case <-s.stop.Done():
			return nil
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
			if s.stop.Err() != nil {
				s.requeueUnstarted(d)
				return nil
			}
			select {
			case s.slots <- struct{}{}:
				s.start(s.delivery(d))
			case <-s.stop.Done():
				s.requeueUnstarted(d)
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

// start hands d to the pool; the caller holds a slot for it, so a pool
// goroutine is free (or about to be) and the send does not block.
func (s *session) start(d *delivery) {
	s.mu.Lock()
	s.inflight[d] = struct{}{}
	s.mu.Unlock()
	s.wg.Add(1)
	s.work <- d
}

// drain is the graceful shutdown: stop the consumer, requeue what was
// received but not started, and give the running handlers
// ShutdownTimeout to finish before cancelling them.
func (s *session) drain(ch *amqp.Channel, deliveries <-chan amqp.Delivery) {
	if err := ch.Cancel(s.tag, false); err != nil {
		// The channel is closing; its unacked deliveries return to the
		// queue with it.
		s.log.Warn("worker: cancel the consumer", "error", err)
	} else {
		// After basic.cancel-ok the library hands over what it had
		// buffered and closes deliveries.
		for d := range deliveries {
			s.requeueUnstarted(d)
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
		s.requeue(d, describe(d.Delivery), s.log)
	}
}

func (s *session) inflightCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.inflight)
}

// requeueUnstarted returns a delivery that never reached a handler.
func (s *session) requeueUnstarted(d amqp.Delivery) {
	s.requeue(s.delivery(d), describe(d), s.log)
}

// requeue nacks d back to the queue, unfinished, for another run.
func (s *session) requeue(d *delivery, ev Event, log *slog.Logger) {
	ran, err := d.settle(func() error { return d.Nack(false, true) })
	if !ran {
		return
	}
	if err != nil {
		// The channel is gone, and the broker requeued d with it.
		log.Debug("worker: nack", "error", err)
		return
	}
	log.Debug("worker: task requeued by shutdown")
	ev.Kind = EventRequeued
	s.w.emit(ev)
}

// describe identifies d's task for an event, as far as its body allows.
func describe(d amqp.Delivery) Event {
	ev := Event{Type: d.Type, Attempt: retriesSoFar(d.Headers) + 1}
	if ts, _, err := protocol.DecodeTasks(d.Body); err == nil {
		ev.JobID, ev.TaskID = ts[0].JobID, ts[0].TaskID
	}
	return ev
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
