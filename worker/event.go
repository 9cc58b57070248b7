package worker

import "time"

// EventKind says what happened to a task (or to the worker).
type EventKind string

// Event kinds. Every task event is reported after its delivery has been
// settled: acked, or nacked back to the queue.
const (
	// EventCompleted: the task succeeded, its result was confirmed by the
	// broker and the task acked.
	EventCompleted EventKind = "completed"
	// EventFailed: the task failed permanently, its failed result was
	// confirmed and the task acked.
	EventFailed EventKind = "failed"
	// EventRetried: the task failed transiently; a copy with x-retry
	// incremented was confirmed by the retry tier it waits in (Event.Delay)
	// and the original acked.
	EventRetried EventKind = "retried"
	// EventDeadLettered: the task was dead-lettered (Event.Reason says
	// why), the copy confirmed and the original acked.
	EventDeadLettered EventKind = "dead_lettered"
	// EventPublishFailed: a result, retry or dead letter was not confirmed;
	// the task was nacked back to the queue and will run again.
	EventPublishFailed EventKind = "publish_failed"
	// EventRequeued: shutdown returned the task to the queue unfinished
	// (never started, or its handler outlived ShutdownTimeout).
	EventRequeued EventKind = "requeued"
	// EventSkipped: the task's job was cancelled (a control broadcast);
	// the task was acked without running its handler or publishing a
	// result.
	EventSkipped EventKind = "skipped"
	// EventSplit: a redelivered task batch message was republished as one
	// message per task (one event per task), so that a task that crashes
	// its worker does not take its batch with it.
	EventSplit EventKind = "split"
	// EventUnserved: the worker has no handler (or, for a reduce task, no
	// reducer) for the task's type; a copy that waits Event.Delay in a
	// retry tier, for a worker that serves the type, was confirmed and the
	// original acked. Event.Err says which type. It is no run and no
	// retry: once the task has gone unserved for longer than its timeout,
	// it is dead-lettered instead (EventDeadLettered, reason
	// protocol.ReasonUnknownType).
	EventUnserved EventKind = "unserved"
	// EventHeld: the task's job or work queue (Event.Queue) is paused (a
	// control broadcast): a copy that waits Event.Delay in a retry tier
	// was confirmed and the original acked, without running the handler.
	// It is no run and no retry, and spends no attempt.
	EventHeld EventKind = "held"
	// EventPauseSeen: a pause broadcast for job Event.JobID, or work
	// queue Event.Queue, arrived (the first or a refresh); their tasks
	// delivered from now on are held (EventHeld). It carries no other
	// task fields.
	EventPauseSeen EventKind = "pause_seen"
	// EventResumeSeen: a resume broadcast for job Event.JobID, or work
	// queue Event.Queue, arrived; their tasks run again. It carries no
	// other task fields.
	EventResumeSeen EventKind = "resume_seen"
	// EventCancelSeen: a cancel broadcast for Event.JobID arrived; the
	// job's tasks delivered from now on are skipped. It carries no other
	// task fields.
	EventCancelSeen EventKind = "cancel_seen"
	// EventDraining: Run stopped taking new tasks after its context was
	// done and returned the unstarted ones; in-flight handlers are still
	// finishing. It carries no task fields.
	EventDraining EventKind = "draining"
	// EventConnectionLost: a broker connection or channel closed under
	// Run, or the broker cancelled one of its consumers; Event.Err wraps
	// ErrConnectionLost and says why. Run stopped taking tasks, the
	// unfinished ones go back to the queue, and it is reconnecting. It
	// carries no task fields.
	EventConnectionLost EventKind = "connection_lost"
	// EventConnected: Run connected for the first time, declared the
	// topology and consumes the work and control queues. It carries no
	// task fields.
	EventConnected EventKind = "connected"
	// EventReconnected: after EventConnectionLost, Run connected again,
	// declared the topology and consumes the work and control queues. It
	// carries no task fields.
	EventReconnected EventKind = "reconnected"
	// EventStarted: a task's message was taken into a concurrency slot and
	// goes to its handler (or to whatever settles it without one: a
	// cancelled job, an unknown type). One per task, before the task's
	// other events.
	EventStarted EventKind = "started"
	// EventDone: the worker is done with a task it reported EventStarted
	// for, and its concurrency slot is free: the task was settled (its
	// outcome event came first), requeued, or left to the broker by a lost
	// connection. Exactly one per EventStarted, so that the tasks between
	// the two are the tasks in flight.
	EventDone EventKind = "done"
)

// Event reports one outcome to Config.OnEvent, for tests and metrics.
type Event struct {
	// Kind is what happened.
	Kind EventKind
	// JobID, TaskID and Type identify the task; JobID is empty and TaskID
	// 0 when the message was malformed.
	JobID  string
	TaskID int64
	Type   string
	// Queue is the work queue of EventHeld's task, and of
	// EventPauseSeen and EventResumeSeen when they are about a queue.
	Queue string
	// Attempt is the run the event is about, starting at 1.
	Attempt int
	// Reason is the dead-letter reason (a protocol.Reason constant) for
	// EventDeadLettered.
	Reason string
	// Delay is how long the task waits before its next run, for
	// EventRetried, EventUnserved and EventHeld: the delay of the retry tier it was
	// published to.
	Delay time.Duration
	// Duration is how long the task's handler ran, for EventCompleted,
	// EventRetried and EventDeadLettered when a handler ran (a
	// BatchHandlerFunc's whole call, for each of its tasks); 0 when no
	// handler ran (a malformed message, an unknown type).
	Duration time.Duration
	// Err is the handler's error for EventFailed, EventRetried and
	// EventDeadLettered (or the timeout's, wrapping
	// context.DeadlineExceeded, for a run past its Task.Timeout), the
	// publish error for EventPublishFailed, and
	// why the connection was lost for EventConnectionLost.
	Err error
}
