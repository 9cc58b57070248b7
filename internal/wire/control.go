package wire

import (
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenhq/warren/protocol"
)

// Cancel is the control message that tells every running worker that job
// jobID is cancelled, for the control exchange. It is transient: a worker
// that is not running misses it, and the job's later results are ignored
// anyway.
func Cancel(names protocol.Names, jobID string) (Outbound, error) {
	body, err := protocol.EncodeControl(protocol.Control{Type: protocol.ControlCancel, JobID: jobID})
	if err != nil {
		return Outbound{}, err
	}
	return Outbound{Exchange: names.ControlExchange, Msg: amqp.Publishing{
		ContentType:   protocol.ContentType,
		DeliveryMode:  amqp.Transient,
		MessageId:     protocol.ControlCancel + ":" + jobID,
		CorrelationId: jobID,
		Type:          protocol.ControlCancel,
		Body:          body,
	}}, nil
}

// Pause is the control message that tells every running worker to start
// no task of job jobID, or, with jobID "", of work queue queue
// (protocol.ControlPause); Resume ends it. Both are transient, as Cancel
// is: the server sends a pause again every protocol.PauseRefresh while it
// lasts, so that a worker that missed it learns of it.
func Pause(names protocol.Names, jobID, queue string) (Outbound, error) {
	return pauseControl(names, protocol.ControlPause, jobID, queue)
}

// Resume is the control message that ends a Pause of job jobID, or, with
// jobID "", of work queue queue (protocol.ControlResume).
func Resume(names protocol.Names, jobID, queue string) (Outbound, error) {
	return pauseControl(names, protocol.ControlResume, jobID, queue)
}

func pauseControl(names protocol.Names, kind, jobID, queue string) (Outbound, error) {
	body, err := protocol.EncodeControl(protocol.Control{Type: kind, JobID: jobID, Queue: queue})
	if err != nil {
		return Outbound{}, err
	}
	target := "job:" + jobID
	if jobID == "" {
		target = "queue:" + queue
	}
	return Outbound{Exchange: names.ControlExchange, Msg: amqp.Publishing{
		ContentType:   protocol.ContentType,
		DeliveryMode:  amqp.Transient,
		MessageId:     kind + ":" + target,
		CorrelationId: jobID,
		Type:          kind,
		Body:          body,
	}}, nil
}
