// Package protocol is warren's wire format: the task and result messages,
// their AMQP properties and headers, and the exchange and queue names. It
// is documented for other languages in docs/protocol.md; change both
// together.
package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ContentType is the content type of every warren message body.
const ContentType = "application/json"

// AMQP header names carried by task and dead-letter messages.
const (
	// HeaderRetry is the number of retries a task message has had so far
	// (0 on its first run).
	HeaderRetry = "x-retry"
	// HeaderMaxRetries is the job's retry budget, copied onto every task
	// message so that stateless workers can decide on a retry.
	HeaderMaxRetries = "x-max-retries"
	// HeaderError is the error text of a task dead-lettered by a worker.
	HeaderError = "x-error"
	// HeaderReason is why a message was dead-lettered; one of the Reason
	// constants.
	HeaderReason = "x-failure-reason"
	// HeaderWorker names the worker that dead-lettered a message.
	HeaderWorker = "x-worker"
	// HeaderFailedAt is the RFC 3339 time a worker dead-lettered a message.
	HeaderFailedAt = "x-failed-at"
	// HeaderStartedAt is the RFC 3339 time the failed run of a
	// dead-lettered task started, when it ran.
	HeaderStartedAt = "x-started-at"
)

// Dead-letter reasons carried in HeaderReason.
const (
	// ReasonPermanent: the handler returned a permanent error.
	ReasonPermanent = "permanent"
	// ReasonRetriesExhausted: the task failed transiently 1+max_retries times.
	ReasonRetriesExhausted = "retries_exhausted"
	// ReasonUnknownType: no handler on the queue serves the task's type.
	ReasonUnknownType = "unknown_type"
	// ReasonMalformed: the message is not a valid task or result.
	ReasonMalformed = "malformed"
	// ReasonDeliveryLimit: the broker dead-lettered the message after the
	// quorum queue's delivery limit (the task kept crashing its worker).
	ReasonDeliveryLimit = "delivery_limit"
	// ReasonRejected: the broker dead-lettered a rejected message.
	ReasonRejected = "rejected"
	// ReasonExpired: the broker dead-lettered an expired message.
	ReasonExpired = "expired"
)

// Result statuses. A result without a status is a completed task.
const (
	// StatusCompleted marks a task that succeeded.
	StatusCompleted = "completed"
	// StatusFailed marks a task that failed permanently.
	StatusFailed = "failed"
)

// ErrMalformed is wrapped by every decode error: the message can never be
// processed and must be dead-lettered, not redelivered.
var ErrMalformed = errors.New("malformed message")

// Task is the body of a task message.
type Task struct {
	// JobID is the job the task belongs to.
	JobID string `json:"job_id"`
	// TaskID is the task's position in its job, 1..N.
	TaskID int64 `json:"task_id"`
	// Payload is the task's whole input.
	Payload json.RawMessage `json:"payload"`
}

// Result is the body of a result message. Only JobID, TaskID and Result
// are required; a worker in any language may publish just those three.
type Result struct {
	JobID  string          `json:"job_id"`
	TaskID int64           `json:"task_id"`
	Result json.RawMessage `json:"result"`
	// Status is StatusCompleted (the default when empty) or StatusFailed.
	Status string `json:"status,omitempty"`
	// Error is the failure's text when Status is StatusFailed.
	Error string `json:"error,omitempty"`
	// Worker identifies the worker process that ran the task.
	Worker string `json:"worker,omitempty"`
	// Attempt is the run that produced this result, starting at 1.
	Attempt int `json:"attempt,omitempty"`
	// StartedAt and FinishedAt bound the handler's run.
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// Failed reports whether the result records a permanent failure.
func (r Result) Failed() bool { return r.Status == StatusFailed }

// MessageID is the AMQP message_id of a task and of its result:
// "<job_id>:<task_id>". It is also the task's idempotency key.
func MessageID(jobID string, taskID int64) string {
	return jobID + ":" + strconv.FormatInt(taskID, 10)
}

// ParseMessageID splits a MessageID back into its job and task ids.
func ParseMessageID(id string) (string, int64, error) {
	i := strings.LastIndexByte(id, ':')
	if i <= 0 {
		return "", 0, fmt.Errorf("%w: message id %q is not job_id:task_id", ErrMalformed, id)
	}
	n, err := strconv.ParseInt(id[i+1:], 10, 64)
	if err != nil || n < 1 {
		return "", 0, fmt.Errorf("%w: message id %q has no positive task id", ErrMalformed, id)
	}
	return id[:i], n, nil
}

// EncodeTask returns the JSON body of a task message.
func EncodeTask(t Task) ([]byte, error) {
	if err := checkIDs(t.JobID, t.TaskID); err != nil {
		return nil, err
	}
	if len(t.Payload) == 0 {
		t.Payload = json.RawMessage("null")
	}
	return json.Marshal(t)
}

// DecodeTask parses and validates a task message body. Every error wraps
// ErrMalformed.
func DecodeTask(body []byte) (Task, error) {
	var t Task
	if err := decodeStrict(body, &t); err != nil {
		return Task{}, err
	}
	if err := checkIDs(t.JobID, t.TaskID); err != nil {
		return Task{}, err
	}
	if len(t.Payload) == 0 {
		t.Payload = json.RawMessage("null")
	}
	return t, nil
}

// EncodeResult returns the JSON body of a result message.
func EncodeResult(r Result) ([]byte, error) {
	if err := checkIDs(r.JobID, r.TaskID); err != nil {
		return nil, err
	}
	if len(r.Result) == 0 {
		r.Result = json.RawMessage("null")
	}
	return json.Marshal(r)
}

// DecodeResult parses and validates a result message body. A result
// without a status is completed. Every error wraps ErrMalformed.
func DecodeResult(body []byte) (Result, error) {
	var r Result
	if err := decodeStrict(body, &r); err != nil {
		return Result{}, err
	}
	if err := checkIDs(r.JobID, r.TaskID); err != nil {
		return Result{}, err
	}
	switch r.Status {
	case "":
		r.Status = StatusCompleted
	case StatusCompleted, StatusFailed:
	default:
		return Result{}, fmt.Errorf("%w: unknown status %q", ErrMalformed, r.Status)
	}
	if len(r.Result) == 0 {
		r.Result = json.RawMessage("null")
	}
	return r, nil
}

// decodeStrict unmarshals one JSON object. Unknown fields are allowed so
// that newer senders can add optional fields.
func decodeStrict(body []byte, v any) error {
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return fmt.Errorf("%w: body is not a JSON object", ErrMalformed)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return nil
}

func checkIDs(jobID string, taskID int64) error {
	if jobID == "" {
		return fmt.Errorf("%w: job_id is missing", ErrMalformed)
	}
	if taskID < 1 {
		return fmt.Errorf("%w: task_id must be a positive integer, got %d", ErrMalformed, taskID)
	}
	return nil
}
