package worker

import (
	"context"
	"encoding/json"

	"github.com/warrenhq/warren/protocol"
)

// HandlerFunc runs one task. Its result is marshalled to JSON and becomes
// the task's result: a json.RawMessage, or a []byte holding valid JSON, is
// used as it is; anything else goes through json.Marshal, and a value that
// cannot be marshalled fails the task permanently.
//
// A nil error completes the task. An error marked with Permanent fails it
// at once; any other error (or a panic) is transient and the task is
// retried until its retry budget is spent. ctx is cancelled only when the
// worker gives up waiting for the handler at shutdown; the task is then
// requeued whatever the handler returns.
//
// A task can run more than once (retries, redeliveries after a crash), so
// handlers should be idempotent; Task.IdempotencyKey helps with that.
type HandlerFunc func(ctx context.Context, t Task) (any, error)

// BatchHandlerFunc runs all the tasks of one task batch message at once,
// for handlers that are cheaper per task in bulk (one database round trip
// for the batch, say). It returns one Outcome per task, in the order of
// tasks; each is treated as a HandlerFunc's return for that task: results
// are marshalled the same way, a Permanent error fails the task at once,
// any other error is retried, per task. A panic, or a slice of the wrong
// length, is a transient error for every task of the batch. ctx is as for
// a HandlerFunc.
type BatchHandlerFunc func(ctx context.Context, tasks []Task) []Outcome

// Outcome is one task's outcome from a BatchHandlerFunc: what a
// HandlerFunc would have returned for it.
type Outcome struct {
	// Value is the task's result, marshalled as a HandlerFunc's.
	Value any
	// Err, when not nil, fails the task: permanently if marked with
	// Permanent, else transiently (retried).
	Err error
}

// Task is one task as a handler sees it.
type Task struct {
	// JobID is the job the task belongs to.
	JobID string
	// TaskID is the task's position in its job, 1..N.
	TaskID int64
	// Type is the handler name the task was sent to.
	Type string
	// Attempt is this run's number: 1 on the first run, 2 on the first
	// retry, and so on. Redeliveries that are not retries (a worker crashed
	// or could not publish the result) keep the same attempt.
	Attempt int
	// MaxRetries is how many retries the task gets after its first run.
	// Attempt > MaxRetries means this is the last one.
	MaxRetries int
	// Payload is the task's whole input, as JSON.
	Payload json.RawMessage
}

// IdempotencyKey returns "<job_id>:<task_id>", the same on every run of
// the task, for deduplication in external systems. It equals the task
// message's message_id (protocol.MessageID).
func (t Task) IdempotencyKey() string { return protocol.MessageID(t.JobID, t.TaskID) }

// message is t as a task message carries it.
func (t Task) message() protocol.Task {
	return protocol.Task{JobID: t.JobID, TaskID: t.TaskID, Payload: t.Payload}
}
