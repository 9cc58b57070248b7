package protocol

import (
	"encoding/json"
	"fmt"
	"time"
)

// ReduceTaskID is the task id of a job's reduce task: task 0, which runs a
// reducer over the outcomes of the job's map tasks (1..N) once they are
// all accounted for. A task message with task_id 0 is valid only with
// "reduce": true (Task.Reduce), and its result is the job's result.
const ReduceTaskID = 0

// HeaderReduce is set, to the integer 1, on a reduce task message, so that
// a reduce task is told apart without reading its body; the body's
// "reduce": true is what a worker goes by.
const HeaderReduce = "x-reduce"

// DirectReplyTo is RabbitMQ's direct reply-to pseudo-queue: a client
// consumes it with automatic acks, on the channel it then publishes its
// requests from, and names it in their reply_to; the broker routes each
// reply straight back to that channel.
const DirectReplyTo = "amq.rabbitmq.reply-to"

// OutcomesTimeout is how long a worker waits for the reply to one
// outcomes request; a request with no reply by then fails its reduce task
// transiently (it is retried).
const OutcomesTimeout = 60 * time.Second

// OutcomesExpiration is the expiration property of an outcomes request,
// OutcomesTimeout in milliseconds: a request nobody took by the time its
// worker stops waiting is dropped from outcomes.q, unanswered.
const OutcomesExpiration = "60000"

// Error codes of an outcomes reply (OutcomesError.Code).
const (
	// OutcomesStale: the job is not reducing at the request's generation
	// (it was cancelled, closed, or its reduce task was made runnable
	// again with a newer generation). The worker acks its reduce task and
	// publishes nothing.
	OutcomesStale = "stale"
	// OutcomesUnavailable: the server cannot read the outcomes now (its
	// store is down, say). The reduce task fails transiently.
	OutcomesUnavailable = "unavailable"
	// OutcomesBadRequest: the request is not an outcomes request. The
	// reduce task fails transiently.
	OutcomesBadRequest = "bad_request"
)

// OutcomesRequest is the body of a request to the outcomes RPC (published
// to the default exchange with routing key Names.OutcomesQueue): a page of
// the outcomes of job JobID's map tasks whose ids are above After.
type OutcomesRequest struct {
	// JobID is the job whose reduce task asks.
	JobID string `json:"job_id"`
	// Generation is the reduce task message's x-generation (0 when it
	// had none): a server answers only while the job reduces at it.
	Generation int `json:"generation"`
	// After is the last task id already read: 0 at first, then the Next
	// of the previous reply.
	After int64 `json:"after"`
}

// TaskOutcome is one map task's outcome in an outcomes reply.
type TaskOutcome struct {
	// TaskID is the task's id, 1..N.
	TaskID int64 `json:"task_id"`
	// State is the task's terminal state: StatusCompleted or
	// StatusFailed.
	State string `json:"state"`
	// Result is the task's result, when it completed.
	Result json.RawMessage `json:"result,omitempty"`
	// Error is the task's failure, when it failed.
	Error string `json:"error,omitempty"`
}

// OutcomesError is the error of an outcomes reply that carries no page.
type OutcomesError struct {
	// Code is one of OutcomesStale, OutcomesUnavailable and
	// OutcomesBadRequest; a worker treats any code other than
	// OutcomesStale as a transient failure.
	Code string `json:"code"`
	// Message says what went wrong, for people.
	Message string `json:"message,omitempty"`
}

// Error returns the code and message.
func (e *OutcomesError) Error() string {
	return fmt.Sprintf("outcomes RPC: %s: %s", e.Code, e.Message)
}

// OutcomesReply is the body of a reply of the outcomes RPC: a page of
// outcomes, or an error.
type OutcomesReply struct {
	// Outcomes are at least one outcome, in increasing task id order,
	// all above the request's After. Empty when Error is set.
	Outcomes []TaskOutcome `json:"outcomes,omitempty"`
	// Next is the After of the next request; nil (JSON null or absent)
	// when there are no more outcomes.
	Next *int64 `json:"next,omitempty"`
	// Error, when set, replaces the page.
	Error *OutcomesError `json:"error,omitempty"`
}

// EncodeOutcomesRequest returns the JSON body of an outcomes request.
func EncodeOutcomesRequest(r OutcomesRequest) ([]byte, error) {
	if err := checkOutcomesRequest(r); err != nil {
		return nil, err
	}
	return json.Marshal(r)
}

// DecodeOutcomesRequest parses and validates the body of an outcomes
// request. Every error wraps ErrMalformed: the server answers it with
// OutcomesBadRequest.
func DecodeOutcomesRequest(body []byte) (OutcomesRequest, error) {
	var r OutcomesRequest
	if err := decodeStrict(body, &r); err != nil {
		return OutcomesRequest{}, err
	}
	return r, checkOutcomesRequest(r)
}

func checkOutcomesRequest(r OutcomesRequest) error {
	switch {
	case r.JobID == "":
		return fmt.Errorf("%w: job_id is missing", ErrMalformed)
	case r.Generation < 0:
		return fmt.Errorf("%w: generation must not be negative, got %d", ErrMalformed, r.Generation)
	case r.After < 0:
		return fmt.Errorf("%w: after must not be negative, got %d", ErrMalformed, r.After)
	}
	return nil
}

// EncodeOutcomesReply returns the JSON body of an outcomes reply: an
// error, or a page that DecodeOutcomesReply takes for a request with
// after.
func EncodeOutcomesReply(r OutcomesReply, after int64) ([]byte, error) {
	if err := checkOutcomesReply(&r, after); err != nil {
		return nil, err
	}
	return json.Marshal(r)
}

// DecodeOutcomesReply parses and validates the body of a reply to an
// outcomes request with after: an error with a code, or a page of at
// least one outcome in increasing task id order above after, each
// completed or failed, and a Next, when there is one, at or above the
// last of them. Every error wraps ErrMalformed.
func DecodeOutcomesReply(body []byte, after int64) (OutcomesReply, error) {
	var r OutcomesReply
	if err := decodeStrict(body, &r); err != nil {
		return OutcomesReply{}, err
	}
	if err := checkOutcomesReply(&r, after); err != nil {
		return OutcomesReply{}, err
	}
	return r, nil
}

func checkOutcomesReply(r *OutcomesReply, after int64) error {
	if r.Error != nil {
		if r.Error.Code == "" {
			return fmt.Errorf("%w: an outcomes error needs a code", ErrMalformed)
		}
		r.Outcomes, r.Next = nil, nil
		return nil
	}
	if len(r.Outcomes) == 0 {
		return fmt.Errorf("%w: an outcomes page holds at least one outcome", ErrMalformed)
	}
	prev := after
	for i, o := range r.Outcomes {
		if o.TaskID <= prev {
			return fmt.Errorf("%w: outcome %d: task ids must increase from after %d, got %d after %d", ErrMalformed, i, after, o.TaskID, prev)
		}
		if o.State != StatusCompleted && o.State != StatusFailed {
			return fmt.Errorf("%w: outcome %d (task %d): state must be %q or %q, got %q", ErrMalformed, i, o.TaskID, StatusCompleted, StatusFailed, o.State)
		}
		prev = o.TaskID
	}
	if r.Next != nil && *r.Next < prev {
		return fmt.Errorf("%w: next %d is below the page's last task id %d", ErrMalformed, *r.Next, prev)
	}
	return nil
}
