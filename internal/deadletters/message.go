package deadletters

import (
	"cmp"
	"strings"
	"time"

	"github.com/warrenhq/warren/internal/wire"
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
	// Settled, when not "", says why the dead letter needs nothing more
	// (Settled*): its job was deleted or cancelled, its task was sent back
	// since (a redrive, a replay: the store holds a newer generation) or
	// completed. "" means it is pending: the store holds its task failed
	// at its generation (or has not recorded the failure yet), and a
	// replay would run it again. Only List fills it in.
	Settled string `json:"settled,omitempty"`
}

// Why a dead letter is settled (Message.Settled).
const (
	// SettledJobDeleted: the store has no such job (deleted, by
	// `warren delete` or retention, or never known).
	SettledJobDeleted = "job_deleted"
	// SettledJobCancelled: the job was cancelled; a replay skips it.
	SettledJobCancelled = "job_cancelled"
	// SettledResent: the task was sent back since it was dead-lettered (a
	// redrive, a replay, a requeue): the store holds a newer generation,
	// whose own failure, if any, has a dead letter of its own.
	SettledResent = "resent"
	// SettledCompleted: the task completed at the dead letter's
	// generation (another copy of it ran).
	SettledCompleted = "completed"
	// SettledUnknownTask: the job has no such task.
	SettledUnknownTask = "unknown_task"
)

// message is the listing of dead letter dl.
func message(dl wire.DeadLetter) Message {
	m := Message{JobID: dl.JobID, TaskID: dl.TaskID, MessageID: dl.MessageID, RoutingKey: dl.RoutingKey,
		Reason: dl.Reason, Error: dl.Error, Attempts: dl.Attempts(), Time: dl.FailedAt}
	if dl.Batch {
		for _, t := range dl.Tasks {
			m.TaskIDs = append(m.TaskIDs, t.TaskID)
		}
	}
	return m
}

// compare orders messages by dead-letter time, then job and task: the
// broker does not keep a quorum queue's order when it takes messages
// back, so the queue's own order is not worth showing.
func compare(a, b Message) int {
	return cmp.Or(a.Time.Compare(b.Time), strings.Compare(a.JobID, b.JobID), cmp.Compare(a.TaskID, b.TaskID),
		strings.Compare(a.MessageID, b.MessageID))
}
