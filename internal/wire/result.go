package wire

import (
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenhq/warren/protocol"
)

// Results returns the result message of the completed tasks of one task
// message, for the results exchange: a single result (results has one
// element) when batch is false, a result batch identified like a task
// batch by its first task and count when it is true. It is persistent,
// JSON, and correlated with the job. The error says why the results
// cannot be encoded.
func Results(names protocol.Names, results []protocol.Result, batch bool) (Outbound, error) {
	if len(results) == 0 {
		return Outbound{}, fmt.Errorf("wire: a result message needs a result")
	}
	jobID, first := results[0].JobID, results[0].TaskID
	var (
		body []byte
		err  error
		id   string
	)
	if batch {
		body, err = protocol.EncodeResultBatch(protocol.ResultBatch{JobID: jobID, Results: results})
		id = protocol.BatchMessageID(jobID, first, len(results))
	} else {
		body, err = protocol.EncodeResult(results[0])
		id = protocol.MessageID(jobID, first)
	}
	if err != nil {
		return Outbound{}, fmt.Errorf("wire: encode the results: %w", err)
	}
	return Outbound{Exchange: names.ResultsExchange, Key: protocol.RoutingKeyResult, Msg: amqp.Publishing{
		ContentType:   protocol.ContentType,
		DeliveryMode:  amqp.Persistent,
		MessageId:     id,
		CorrelationId: jobID,
		Timestamp:     time.Now().UTC(),
		Body:          body,
	}}, nil
}

// ReadResults reads a delivery of the results queue: the results of a
// result message, one or a batch's, each with its job id and a status
// (completed when the message gave none). The error, which wraps
// protocol.ErrMalformed, says why the message can never be applied.
func ReadResults(d amqp.Delivery) ([]protocol.Result, error) {
	return protocol.DecodeResults(d.Body)
}
