package broker

import (
	"context"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenhq/warren/protocol"
)

// PublishCancel broadcasts that job jobID is cancelled to every running
// worker, through the control exchange, and waits for the broker's
// confirm. The message is transient: a worker that is not running now
// misses it, and the job's later results are ignored anyway. With no
// worker bound the broker returns the message; that is success, since no
// worker has anything to skip.
func PublishCancel(ctx context.Context, p *Publisher, names protocol.Names, jobID string) error {
	body, err := protocol.EncodeControl(protocol.Control{Type: protocol.ControlCancel, JobID: jobID})
	if err != nil {
		return fmt.Errorf("broker: cancel job %q: %w", jobID, err)
	}
	err = p.PublishAndWait(ctx, names.ControlExchange, "", amqp.Publishing{
		ContentType:   protocol.ContentType,
		DeliveryMode:  amqp.Transient,
		MessageId:     protocol.ControlCancel + ":" + jobID,
		CorrelationId: jobID,
		Type:          protocol.ControlCancel,
		Body:          body,
	})
	if err != nil && !errors.Is(err, ErrUnroutable) {
		return fmt.Errorf("broker: broadcast the cancel of job %q: %w", jobID, err)
	}
	return nil
}
