package worker

import (
	"context"
	"encoding/json"
	"time"

	"github.com/warrenhq/warren/internal/outcome"
	"github.com/warrenhq/warren/protocol"
)

// HandlerFunc runs one task. Its result is marshalled to JSON and becomes
// the task's result: a json.RawMessage, or a []byte holding valid JSON, is
// used as it is; anything else goes through json.Marshal, and a value that
// cannot be marshalled fails the task permanently.
//
// A nil error completes the task. An error marked with Permanent fails it
// at once; any other error (or a panic) is transient and the task is
// retried until its retry budget is spent.
//
// When the task has a time limit (Task.Timeout: its job's task_timeout),
// ctx has the deadline of the call's start plus that limit, and a run
// that ends at or after it is a transient failure whatever the handler
// returned, a result or an error, permanent or not: its error names the
// timeout ("worker: task timeout of 5s exceeded", wrapping
// context.DeadlineExceeded; context.Cause(ctx) is the same error), and
// the task is retried and then dead-lettered like any transient failure.
// The worker cannot stop a handler that ignores ctx: such a handler runs
// to its end, holding its concurrency slot, and what it returns is then
// dropped. Pass ctx on to what the handler waits for.
//
// ctx is also cancelled when the worker gives up waiting for the handler
// at shutdown; the task is then requeued whatever the handler returns.
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
// a HandlerFunc, with one deadline for the whole call: its start plus the
// tasks' Timeout (the tasks of a batch share one), not that limit per
// task. A call that ends at or after it fails every task of the batch
// with the timeout.
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
	// Timeout is the time limit of each run: the job's task_timeout, as
	// the task message's x-task-timeout header carries it. The handler's
	// context has the deadline of the call's start plus Timeout, and a
	// run that ends at or after it fails transiently (see HandlerFunc).
	// 0 means no limit: a task message without the header, from an older
	// warren or another producer, runs without a deadline.
	Timeout time.Duration
	// Payload is the task's whole input, as JSON.
	Payload json.RawMessage

	// spawn gathers what the run spawns (Spawn); shared by the copies of
	// the Task the handler makes.
	spawn *outcome.Spawns
}

func init() {
	outcome.AttachSpawns = func(t Task, s *outcome.Spawns) Task {
		t.spawn = s
		return t
	}
}

// Spawn adds tasks to the task's job, one per payload, each a value its
// handler could return as a result (a json.RawMessage, or a []byte
// holding valid JSON, as it is; anything else through json.Marshal). It
// may be called several times in one run; the tasks go with the run's
// result, after the earlier ones, and exist only if the result is
// recorded completed: a run that fails, is retried, times out or goes
// back to the queue spawns nothing, and a run of a task that ran before,
// or whose result is delivered twice, spawns once. The spawned tasks get
// the job's next task ids, in order, and its expected_tasks grows by as
// many; each may spawn in turn. The server refuses a spawn that would
// take its job over the server's limit of tasks per job, or holds a
// payload over its task payload limit: the task then fails with an error
// that says so.
//
// A spawn that does not fit in one result message with the result
// (Config.MaxMessageBytes less protocol.EnvelopeBytes) goes in several,
// spawn parts that the store records together (protocol.Result.SpawnParts);
// a payload that cannot fit in one with the result fails the run
// permanently, with protocol.ReasonResultTooLarge.
//
// Spawn returns an error, and adds none of the payloads, when one does
// not marshal, when the run's spawn would be over 64 MiB of JSON, when
// called on a reduce task, or after the run returned.
func (t Task) Spawn(payloads ...any) error {
	return t.spawn.Add(payloads...)
}

// IdempotencyKey returns "<job_id>:<task_id>", the same on every run of
// the task, for deduplication in external systems. It equals the task
// message's message_id (protocol.MessageID).
func (t Task) IdempotencyKey() string { return protocol.MessageID(t.JobID, t.TaskID) }

// message is t as a task message carries it.
func (t Task) message() protocol.Task {
	return protocol.Task{JobID: t.JobID, TaskID: t.TaskID, Payload: t.Payload}
}
