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
