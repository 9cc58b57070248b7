package worker

import (
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenhq/warren/protocol"
)

// controlPrefetch bounds the control messages handed to the worker at
// once; they are tiny and handled at once.
const controlPrefetch = 100

// controlConsumer is this worker's subscription to the control exchange.
type controlConsumer struct {
	ch         *amqp.Channel
	deliveries <-chan amqp.Delivery
	closes     <-chan *amqp.Error
	// lost is closed when the consumer's deliveries end: its channel or
	// connection closed, or the broker cancelled it.
	lost chan struct{}
}

// consumeControl declares this worker's own control queue (exclusive,
// auto-delete, server-named: it lives as long as this connection), binds
// it to the control exchange and consumes it.
func (w *Worker) consumeControl(conn *amqp.Connection, tag string) (*controlConsumer, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("worker: open the control channel: %w", err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeClassic})
	if err == nil {
		err = ch.QueueBind(q.Name, "", w.names.ControlExchange, false, nil)
	}
	if err == nil {
		err = ch.Qos(controlPrefetch, 0, false)
	}
	var deliveries <-chan amqp.Delivery
	if err == nil {
		deliveries, err = ch.Consume(q.Name, tag, false, true, false, false, nil)
	}
	if err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("worker: subscribe to the control exchange %q: %w", w.names.ControlExchange, err)
	}
	c := &controlConsumer{
		ch:         ch,
		deliveries: deliveries,
		closes:     ch.NotifyClose(make(chan *amqp.Error, 1)),
		lost:       make(chan struct{}),
	}
	if w.testHookControl != nil {
		w.testHookControl(q.Name, ch)
	}
	return c, nil
}

// run handles control messages until the deliveries end, then closes lost.
func (c *controlConsumer) run(w *Worker) {
	defer close(c.lost)
	for d := range c.deliveries {
		w.control(d)
	}
}

// control applies one control message and acks it. A malformed or unknown
// message is logged and acked: it can never become valid, and a
// broadcast must not stop the worker.
func (w *Worker) control(d amqp.Delivery) {
	defer func() {
		if err := d.Ack(false); err != nil {
			w.log.Debug("worker: ack a control message", "error", err)
		}
	}()
	c, err := protocol.DecodeControl(d.Body)
	if err != nil {
		w.log.Warn("worker: ignoring a malformed control message", "error", err, "message_id", d.MessageId)
		return
	}
	switch c.Type {
	case protocol.ControlCancel:
		if c.JobID == "" {
			w.log.Warn("worker: ignoring a cancel without a job_id", "message_id", d.MessageId)
			return
		}
		w.cancelled.add(c.JobID)
		w.log.Info("worker: job cancelled; its queued tasks will be skipped", "job_id", c.JobID)
		w.emit(Event{Kind: EventCancelSeen, JobID: c.JobID})
	case protocol.ControlPause, protocol.ControlResume:
		w.controlPause(c)
	default:
		w.log.Warn("worker: ignoring a control message of unknown type", "type", c.Type, "job_id", c.JobID)
	}
}

// close closes the control channel and waits for run to return.
func (c *controlConsumer) close() {
	_ = c.ch.Close()
	<-c.lost
}
