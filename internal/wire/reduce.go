package wire

import (
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenhq/warren/protocol"
)

// OutcomesRequest returns the publishing of an outcomes request r for
// the outcomes RPC: to the default exchange with the outcomes queue as
// routing key, transient, expiring after protocol.OutcomesExpiration,
// with replyTo (protocol.DirectReplyTo, or a queue of the caller's) and
// correlationID, which the reply carries back.
func OutcomesRequest(names protocol.Names, r protocol.OutcomesRequest, replyTo, correlationID string) (Outbound, error) {
	body, err := protocol.EncodeOutcomesRequest(r)
	if err != nil {
		return Outbound{}, fmt.Errorf("wire: encode the outcomes request: %w", err)
	}
	return Outbound{Exchange: "", Key: names.OutcomesQueue, Msg: amqp.Publishing{
		ContentType:   protocol.ContentType,
		DeliveryMode:  amqp.Transient,
		ReplyTo:       replyTo,
		CorrelationId: correlationID,
		Expiration:    protocol.OutcomesExpiration,
		Body:          body,
	}}, nil
}

// ReadOutcomesRequest reads a delivery of the outcomes queue. The error
// wraps protocol.ErrMalformed when the body is not an outcomes request
// (answer it with protocol.OutcomesBadRequest), and says so when the
// delivery has no reply_to, which leaves nobody to answer.
func ReadOutcomesRequest(d amqp.Delivery) (protocol.OutcomesRequest, error) {
	if d.ReplyTo == "" {
		return protocol.OutcomesRequest{}, fmt.Errorf("%w: an outcomes request without reply_to", protocol.ErrMalformed)
	}
	return protocol.DecodeOutcomesRequest(d.Body)
}

// OutcomesReply returns the publishing of reply r to request d, a
// delivery of the outcomes queue whose body asked for the outcomes
// after after: to the default exchange with d's reply_to as routing key
// and d's correlation id, transient, expiring as requests do.
func OutcomesReply(d amqp.Delivery, r protocol.OutcomesReply, after int64) (Outbound, error) {
	body, err := protocol.EncodeOutcomesReply(r, after)
	if err != nil {
		return Outbound{}, fmt.Errorf("wire: encode the outcomes reply: %w", err)
	}
	return Outbound{Exchange: "", Key: d.ReplyTo, Msg: amqp.Publishing{
		ContentType:   protocol.ContentType,
		DeliveryMode:  amqp.Transient,
		CorrelationId: d.CorrelationId,
		Expiration:    protocol.OutcomesExpiration,
		Body:          body,
	}}, nil
}

// ReadOutcomesReply reads a reply of the outcomes RPC to a request for
// the outcomes after after: a page, or an error with a code. The error
// wraps protocol.ErrMalformed when the body is neither.
func ReadOutcomesReply(d amqp.Delivery, after int64) (protocol.OutcomesReply, error) {
	return protocol.DecodeOutcomesReply(d.Body, after)
}
