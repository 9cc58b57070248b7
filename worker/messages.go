package worker

import (
	"fmt"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/protocol"
)

// maxHeaderError bounds the error text put in a dead letter's header: the
// headers must fit in one AMQP frame.
const maxHeaderError = 4096

// resultMessage returns the AMQP message of a result: persistent, JSON,
// identified by the task's message id and correlated with its job.
func resultMessage(r protocol.Result) (amqp.Publishing, error) {
	body, err := protocol.EncodeResult(r)
	if err != nil {
		return amqp.Publishing{}, fmt.Errorf("worker: encode the result: %w", err)
	}
	return amqp.Publishing{
		ContentType:   protocol.ContentType,
		DeliveryMode:  amqp.Persistent,
		MessageId:     protocol.MessageID(r.JobID, r.TaskID),
		CorrelationId: r.JobID,
		Timestamp:     time.Now().UTC(),
		Body:          body,
	}, nil
}

// resultBatchMessage returns the AMQP message of the results of a task
// batch message's completed tasks: a result batch identified like a task
// batch by its first task and count.
func resultBatchMessage(results []protocol.Result) (amqp.Publishing, error) {
	jobID := results[0].JobID
	body, err := protocol.EncodeResultBatch(protocol.ResultBatch{JobID: jobID, Results: results})
	if err != nil {
		return amqp.Publishing{}, fmt.Errorf("worker: encode the results: %w", err)
	}
	return amqp.Publishing{
		ContentType:   protocol.ContentType,
		DeliveryMode:  amqp.Persistent,
		MessageId:     protocol.BatchMessageID(jobID, results[0].TaskID, len(results)),
		CorrelationId: jobID,
		Timestamp:     time.Now().UTC(),
		Body:          body,
	}, nil
}

// taskCopy returns a persistent copy of d for task t: d itself (copyOf)
// for a single task message, or a single task message of t with d's
// properties and headers for a task of a batch.
func (s *session) taskCopy(d *delivery, t Task, batch bool) amqp.Publishing {
	msg := s.copyOf(d, t)
	if !batch {
		return msg
	}
	body, err := protocol.EncodeTask(protocol.Task{JobID: t.JobID, TaskID: t.TaskID, Payload: t.Payload})
	if err != nil {
		// Only a bug can get here: t was decoded from a valid batch.
		panic(fmt.Sprintf("worker: encode task %s of a batch: %v", t.IdempotencyKey(), err))
	}
	msg.Body = body
	msg.MessageId = t.IdempotencyKey()
	return msg
}

// copyOf returns a persistent copy of the task message d, with its body,
// properties and a copy of its headers that the caller may change.
func (s *session) copyOf(d *delivery, t Task) amqp.Publishing {
	headers := make(amqp.Table, len(d.Headers)+5)
	for k, v := range d.Headers {
		headers[k] = v
	}
	id := d.MessageId
	switch {
	case id != "":
	case t.JobID != "":
		id = protocol.MessageID(t.JobID, t.TaskID)
	default:
		// The publisher needs an id to match a return to its message; a
		// malformed message without one gets an id unique on this channel.
		id = fmt.Sprintf("malformed:%s:%d", s.tag, d.DeliveryTag)
	}
	// UserId is left out: the broker closes the channel of a publish whose
	// user_id is not the publishing connection's user.
	return amqp.Publishing{
		Headers:         headers,
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    amqp.Persistent,
		Priority:        d.Priority,
		CorrelationId:   d.CorrelationId,
		ReplyTo:         d.ReplyTo,
		Expiration:      d.Expiration,
		MessageId:       id,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		AppId:           d.AppId,
		Body:            d.Body,
	}
}

// retriesSoFar is the task message's x-retry header; 0 when absent or
// not a non-negative integer.
func retriesSoFar(h amqp.Table) int {
	n, ok := protocol.HeaderInt(h, protocol.HeaderRetry)
	if !ok {
		return 0
	}
	return n
}

// maxRetries is the task message's x-max-retries header;
// warren.DefaultMaxRetries when absent or not a non-negative integer.
func maxRetries(h amqp.Table) int {
	n, ok := protocol.HeaderInt(h, protocol.HeaderMaxRetries)
	if !ok {
		return warren.DefaultMaxRetries
	}
	return n
}

// truncate cuts s to at most n bytes on a UTF-8 boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
