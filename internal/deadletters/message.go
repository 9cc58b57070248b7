package deadletters

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenhq/warren/protocol"
)

// Message is one dead-lettered task as the dead-letter queue holds it.
type Message struct {
	// JobID and TaskID name the task; for a malformed body they are what
	// could be read (from the body or the message id), possibly nothing.
	JobID  string `json:"job_id"`
	TaskID int64  `json:"task_id"`
	// TaskIDs lists every task of a task batch message the broker
	// dead-lettered whole (TaskID is then the first); empty for a single
	// task.
	TaskIDs []int64 `json:"task_ids,omitempty"`
	// MessageID is the AMQP message id, "<job_id>:<task_id>" for a task.
	MessageID string `json:"message_id"`
	// RoutingKey is the key the message was dead-lettered with
	// (protocol.RoutingKeyTaskFailed for warren's own dead letters).
	RoutingKey string `json:"routing_key"`
	// Reason is why the task was dead-lettered: a protocol Reason constant
	// from the worker, the broker's x-death reason (delivery_limit,
	// rejected, expired), "malformed" for a body that is not a task, or
	// "unknown".
	Reason string `json:"reason"`
	// Error is the failure's text: the worker's x-error, or a sentence
	// naming the queue the broker dead-lettered the message from.
	Error string `json:"error"`
	// Attempts is the number of runs the task had: x-retry + 1.
	Attempts int `json:"attempts"`
	// Time is when the task was dead-lettered; zero when no header says.
	Time time.Time `json:"time,omitzero"`
}

// Failure headers are dropped from a replayed task: they describe the
// failure that the replay undoes, and the broker's would make a later
// dead-lettering of the replayed task look like an older one.
var failureHeaders = []string{
	protocol.HeaderReason, protocol.HeaderError, protocol.HeaderWorker, protocol.HeaderFailedAt,
	"x-death",
	"x-first-death-reason", "x-first-death-queue", "x-first-death-exchange",
	"x-last-death-reason", "x-last-death-queue", "x-last-death-exchange",
	"x-delivery-count",
}

// decode reads a delivery of the dead-letter queue. The error says why
// the body is not a task message; the Message is filled in anyway, with
// reason "malformed" and whatever ids could be read.
func decode(d amqp.Delivery) (Message, []protocol.Task, bool, error) {
	m := Message{MessageID: d.MessageId, RoutingKey: d.RoutingKey, Attempts: retries(d.Headers) + 1}
	m.Reason, m.Error, m.Time = failure(d.Headers)
	tasks, batch, err := protocol.DecodeTasks(d.Body)
	if err != nil {
		m.JobID, m.TaskID = readIDs(d)
		m.Reason = protocol.ReasonMalformed
		if m.Error == "" {
			m.Error = err.Error()
		}
		return m, nil, false, err
	}
	m.JobID, m.TaskID = tasks[0].JobID, tasks[0].TaskID
	if batch {
		for _, t := range tasks {
			m.TaskIDs = append(m.TaskIDs, t.TaskID)
		}
	}
	return m, tasks, batch, nil
}

// failure returns the reason, error text and time of a dead-lettering:
// the worker's headers when it dead-lettered the task, otherwise the
// broker's most recent dead-lettering.
func failure(h amqp.Table) (reason, text string, at time.Time) {
	if reason, _ := h[protocol.HeaderReason].(string); reason != "" {
		text, _ := h[protocol.HeaderError].(string)
		if s, ok := h[protocol.HeaderFailedAt].(string); ok {
			at, _ = time.Parse(time.RFC3339Nano, s)
		}
		if at.IsZero() {
			_, _, at = lastDeath(h)
		}
		return reason, text, at.UTC()
	}
	reason, queue, at := lastDeath(h)
	if reason == "" {
		return "unknown", "", at
	}
	return reason, fmt.Sprintf("dead-lettered by the broker from %q: %s", queue, reason), at
}

// lastDeath returns the reason, queue and time of the broker's most
// recent dead-lettering: the first x-death entry (RabbitMQ keeps them
// most recent first), else the x-last-death or x-first-death headers.
// A task that waited in a retry tier carries an "expired" entry for it,
// so the first death is not necessarily the one that brought it here.
func lastDeath(h amqp.Table) (reason, queue string, at time.Time) {
	if deaths, ok := h["x-death"].([]any); ok && len(deaths) > 0 {
		if t, ok := deaths[0].(amqp.Table); ok {
			reason, _ = t["reason"].(string)
			queue, _ = t["queue"].(string)
			at, _ = t["time"].(time.Time)
			if reason != "" {
				return reason, queue, at.UTC()
			}
		}
	}
	for _, prefix := range []string{"x-last-death-", "x-first-death-"} {
		if reason, _ = h[prefix+"reason"].(string); reason != "" {
			queue, _ = h[prefix+"queue"].(string)
			return reason, queue, time.Time{}
		}
	}
	return "", "", time.Time{}
}

// readIDs reads what it can of a malformed task's ids: from the body when
// it is an object with usable fields, else from the message id.
func readIDs(d amqp.Delivery) (string, int64) {
	var v struct {
		JobID  any `json:"job_id"`
		TaskID any `json:"task_id"`
	}
	var (
		jobID  string
		taskID int64
	)
	if json.Unmarshal(d.Body, &v) == nil {
		jobID, _ = v.JobID.(string)
		if f, ok := v.TaskID.(float64); ok && f >= 1 && f <= math.MaxInt64 && f == math.Trunc(f) {
			taskID = int64(f)
		}
	}
	if jobID == "" {
		if j, t, err := protocol.ParseMessageID(d.MessageId); err == nil {
			return j, t
		}
	}
	return jobID, taskID
}

// replayMessage returns the task message to republish for task of dead
// letter d: its body (for a task of a batch, the task's own single task
// body) and properties with the retries reset and the failure headers
// dropped. UserId is left out, since the broker closes the channel of a
// publish whose user_id is not the publishing connection's user.
func replayMessage(d amqp.Delivery, task protocol.Task, batch bool) (amqp.Publishing, error) {
	headers := make(amqp.Table, len(d.Headers)+1)
	for k, v := range d.Headers {
		headers[k] = v
	}
	for _, k := range failureHeaders {
		delete(headers, k)
	}
	headers[protocol.HeaderRetry] = int64(0)
	id, body := d.MessageId, d.Body
	if id == "" || batch {
		id = protocol.MessageID(task.JobID, task.TaskID)
	}
	if batch {
		var err error
		if body, err = protocol.EncodeTask(task); err != nil {
			return amqp.Publishing{}, err
		}
	}
	return amqp.Publishing{
		Headers:         headers,
		ContentType:     cmp.Or(d.ContentType, protocol.ContentType),
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
		Body:            body,
	}, nil
}

// compare orders messages by dead-letter time, then job and task: the
// broker does not keep a quorum queue's order when it takes messages
// back, so the queue's own order is not worth showing.
func compare(a, b Message) int {
	return cmp.Or(a.Time.Compare(b.Time), strings.Compare(a.JobID, b.JobID), cmp.Compare(a.TaskID, b.TaskID),
		strings.Compare(a.MessageID, b.MessageID))
}

// retries is the x-retry header: retries before the task was dead-lettered.
func retries(h amqp.Table) int {
	n, _ := protocol.HeaderInt(h, protocol.HeaderRetry)
	return n
}
