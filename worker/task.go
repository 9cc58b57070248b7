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
