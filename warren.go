package warren

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/warrenhq/warren/protocol"
)

// JobState is the lifecycle state of a job.
type JobState string

// Job states. A job is open while pending or running and closed (terminal)
// once completed, failed or cancelled.
const (
	// JobPending means the job and its tasks are written but not all tasks
	// are published yet.
	JobPending JobState = "pending"
	// JobRunning means every task has been published at least once.
	JobRunning JobState = "running"
	// JobCompleted means every task finished and failures stayed within the
	// job's tolerance; the reduced result is available.
	JobCompleted JobState = "completed"
	// JobFailed means the failures exceeded the job's tolerance.
	JobFailed JobState = "failed"
	// JobCancelled means the job was cancelled before it closed.
	JobCancelled JobState = "cancelled"
)

// Terminal reports whether s is a closed state that never changes again
// (short of an explicit redrive).
func (s JobState) Terminal() bool {
	return s == JobCompleted || s == JobFailed || s == JobCancelled
}

// Valid reports whether s is one of the defined job states.
func (s JobState) Valid() bool {
	switch s {
	case JobPending, JobRunning, JobCompleted, JobFailed, JobCancelled:
		return true
	}
	return false
}

// TaskState is the lifecycle state of one task of a job.
type TaskState string

// Task states. Completed, failed and cancelled are terminal: a task leaves
// them only through a redrive.
const (
	// TaskPending means the task row is written and not yet published: the
	// pending task rows are the outbox.
	TaskPending TaskState = "pending"
	// TaskQueued means the broker confirmed the task message.
	TaskQueued TaskState = "queued"
	// TaskCompleted means a handler returned a result for the task.
	TaskCompleted TaskState = "completed"
	// TaskFailed means the task failed permanently: a permanent error,
	// retries exhausted, or dead-lettered by the broker.
	TaskFailed TaskState = "failed"
	// TaskCancelled means the task's job closed before the task finished.
	TaskCancelled TaskState = "cancelled"
)

// Terminal reports whether s is a final task state.
func (s TaskState) Terminal() bool {
	return s == TaskCompleted || s == TaskFailed || s == TaskCancelled
}

// Valid reports whether s is one of the defined task states.
func (s TaskState) Valid() bool {
	switch s {
	case TaskPending, TaskQueued, TaskCompleted, TaskFailed, TaskCancelled:
		return true
	}
	return false
}

// DefaultMaxRetries is the number of retries a task gets after its first
// run when the job does not say otherwise.
const DefaultMaxRetries = 3

// MaxRetriesLimit is the largest Policy.MaxRetries: past a hundred
// retries a task is not failing transiently, and its retry delays would
// outlast any task timeout.
const MaxRetriesLimit = 100

// UnlimitedFailures is the Policy.ToleratedFailures of a job whose
// failures only its percent limits: no count of failed tasks exceeds it.
const UnlimitedFailures = math.MaxInt64

// Policy is how a job runs and closes, and how long it is kept: its
// reducer, retry budget, failure tolerance and retention.
type Policy struct {
	// Reduce names the reducer run over the task results in task order when
	// the job closes ("collect", "sum", "concat", "merge", "none", or one
	// registered in Go); "" when ReduceTask is set.
	Reduce string
	// ReduceTask, when not nil, is the job's reduce task: once every task
	// is accounted for and the failures are within tolerance, warren runs
	// this one task on a worker (task ReduceTaskID of the job), and the
	// job's result is what it returns. nil means the reducer Reduce names.
	ReduceTask *ReduceTask
	// MaxRetries is how many times a transiently failing task is retried
	// after its first run.
	MaxRetries int
	// ToleratedFailures is how many failed tasks a completed job may have;
	// UnlimitedFailures when only the percent limits them.
	ToleratedFailures int64
	// ToleratedFailurePercent is the share of failed tasks (0-100) a
	// completed job may have; 100 when only the count limits them. Both
	// tolerances must hold.
	//
	// The API takes a tolerance that is not given as one that does not
	// limit, as AWS Step Functions does: a job with only
	// tolerated_failures 3 is stored with percent 100, one with only
	// tolerated_failure_percent 10 with UnlimitedFailures, and one with
	// neither tolerates no failure (0 and 0).
	ToleratedFailurePercent float64
	// FailFast closes the job as failed as soon as its failures exceed the
	// tolerance, without waiting for the remaining tasks.
	FailFast bool
	// TaskTimeout is how long a task may stay without a terminal state
	// after its last publish, and after the last time a task message was
	// seen waiting in the queues (a backlog is not a loss), before the
	// reconciler republishes it (or, with no retries left, fails it as
	// lost) once a grace has passed too: docs/failures.md, "Lost, or only
	// waiting". It is also the time limit of each run: the worker gives
	// the handler's context the deadline of the run's start plus
	// TaskTimeout, and a run past it fails like a transient handler error
	// (worker.Task.Timeout). 0 means DefaultTaskTimeout.
	TaskTimeout time.Duration
	// BatchSize is how many consecutive tasks the relay packs into one
	// task message (1..MaxBatchSize), exactly; 1 means one message per
	// task. 0 (the default) lets warren choose, as the job runs, from its
	// tasks' observed durations and the workers consuming its queue:
	// fast tasks travel in batches, slow ones one per message
	// (docs/protocol.md, "Task batching"). Every task keeps its own
	// outcome, retries and dead letter either way.
	BatchSize int
	// Priority is the job's share of the relay's window (MinPriority to
	// MaxPriority): the tasks published in each round are shared between
	// the open jobs in proportion to their priorities, so a job of
	// priority 20 gets twice the share of one of 10. 0 means
	// DefaultPriority.
	Priority int
	// MaxConcurrency is the most of the job's tasks that run at once,
	// across all workers (1..MaxConcurrencyLimit); 0 means no cap. A task
	// counts from the relay's publish until its outcome is recorded
	// (state queued in the store), so its retries, the other tasks of its
	// batch message and a republish by the reconciler all stay within
	// the cap; what the job cannot use of a relay round goes to the other
	// jobs of its queue (docs/failures.md, "A job's concurrency cap").
	MaxConcurrency int
	// Queue is the work queue the job's tasks go to (protocol.CheckQueueName:
	// lowercase letters, digits, '-' and '_'); workers consume the queues
	// they serve. "" means protocol.DefaultQueue.
	Queue string
	// Retention is how long the job is kept once it closed, with its
	// tasks, results and idempotency key: the server deletes it that long
	// after its finished_at (docs/operations.md, "Retention"). A redrive or
	// a replay that reopens the job stops the clock; it starts again when
	// the job closes again. 0 means the server's retention
	// (server.Config.Retention, DefaultRetention unless configured).
	Retention time.Duration
}

// ReduceTask is a job's reduce task (Policy.ReduceTask): a task of type
// Type that a worker runs over the outcomes of the job's other tasks.
type ReduceTask struct {
	// Type names the worker's reducer.
	Type string
	// Queue is the work queue the reduce task goes to
	// (protocol.CheckQueueName); "" means the job's queue
	// (Policy.ReduceQueue).
	Queue string
	// Payload is the reduce task's payload, kept byte for byte; nil means
	// JSON null.
	Payload json.RawMessage
}

// ReduceTaskID is the task id of a job's reduce task: its map tasks are
// 1..ExpectedTasks. It never counts in a job's task counters.
const ReduceTaskID int64 = 0

// Reduce states (Job.ReduceState) of a job with a reduce task. "" means
// no reduce task was started (or a redrive reset it).
const (
	// ReduceRunning means the reduce task exists and has no terminal
	// outcome yet: the job, still open, is reducing.
	ReduceRunning = "running"
	// ReduceCompleted means the reduce task's result is recorded: the job
	// is ready to close with it.
	ReduceCompleted = "completed"
	// ReduceFailed means the reduce task failed: the job is ready to
	// close as failed.
	ReduceFailed = "failed"
)

// ReduceQueue returns the work queue of the job's reduce task: the
// ReduceTask's queue, or the job's (EffectiveQueue) when it names none or
// the job has no reduce task.
func (p Policy) ReduceQueue() string {
	if p.ReduceTask != nil && p.ReduceTask.Queue != "" {
		return protocol.QueueOrDefault(p.ReduceTask.Queue)
	}
	return p.EffectiveQueue()
}

// Job priorities (Policy.Priority).
const (
	MinPriority     = 1
	MaxPriority     = 100
	DefaultPriority = 10
)

// EffectivePriority returns Priority, or DefaultPriority when it is 0.
func (p Policy) EffectivePriority() int {
	if p.Priority == 0 {
		return DefaultPriority
	}
	return p.Priority
}

// MaxConcurrencyLimit is the largest Policy.MaxConcurrency: a cap above
// it is no cap in practice (the relay's window is smaller), and the
// relay counts a capped job's running tasks up to its cap every round.
const MaxConcurrencyLimit = 10000

// DefaultRetention is how long a closed job is kept when neither the job
// (Policy.Retention) nor the server's configuration says otherwise.
const DefaultRetention = 7 * 24 * time.Hour

// MaxRetention is the longest Policy.Retention: a hundred years, as good
// as forever, and still far from where a time.Duration or a timestamp
// overflows.
const MaxRetention = 100 * 365 * 24 * time.Hour

// MaxBatchSize is the largest Policy.BatchSize (the wire protocol's
// limit, protocol.MaxBatchSize).
const MaxBatchSize = 1000

// AutoBatch reports whether warren chooses the job's batch size
// (BatchSize 0).
func (p Policy) AutoBatch() bool { return p.BatchSize == 0 }

// DefaultTaskTimeout is a job's TaskTimeout when it gives none.
const DefaultTaskTimeout = time.Hour

// EffectiveTaskTimeout returns TaskTimeout, or DefaultTaskTimeout when it
// is 0.
func (p Policy) EffectiveTaskTimeout() time.Duration {
	if p.TaskTimeout <= 0 {
		return DefaultTaskTimeout
	}
	return p.TaskTimeout
}

// Validate returns an error naming the first field that is out of range.
func (p Policy) Validate() error {
	switch {
	case p.MaxRetries < 0 || p.MaxRetries > MaxRetriesLimit:
		return fmt.Errorf("max_retries must be between 0 and %d, got %d", MaxRetriesLimit, p.MaxRetries)
	case p.ToleratedFailures < 0:
		return fmt.Errorf("tolerated_failures must be >= 0, got %d", p.ToleratedFailures)
	case math.IsNaN(p.ToleratedFailurePercent) || p.ToleratedFailurePercent < 0 || p.ToleratedFailurePercent > 100:
		return fmt.Errorf("tolerated_failure_percent must be between 0 and 100, got %v", p.ToleratedFailurePercent)
	case p.TaskTimeout < 0:
		return fmt.Errorf("task_timeout must be >= 0, got %s", p.TaskTimeout)
	case p.TaskTimeout > 0 && p.TaskTimeout < time.Second:
		return fmt.Errorf("task_timeout must be at least 1s, got %s", p.TaskTimeout)
	case p.BatchSize < 0 || p.BatchSize > MaxBatchSize:
		return fmt.Errorf("batch_size must be between 1 and %d, got %d", MaxBatchSize, p.BatchSize)
	case p.Priority != 0 && (p.Priority < MinPriority || p.Priority > MaxPriority):
		return fmt.Errorf("priority must be between %d and %d, got %d", MinPriority, MaxPriority, p.Priority)
	case p.MaxConcurrency < 0 || p.MaxConcurrency > MaxConcurrencyLimit:
		return fmt.Errorf("max_concurrency must be between 1 and %d, got %d", MaxConcurrencyLimit, p.MaxConcurrency)
	case p.Queue != "" && protocol.CheckQueueName(p.Queue) != nil:
		return fmt.Errorf("queue: %v", protocol.CheckQueueName(p.Queue))
	case p.Retention < 0:
		return fmt.Errorf("retention must be >= 0, got %s", p.Retention)
	case p.Retention > 0 && p.Retention < time.Second:
		return fmt.Errorf("retention must be at least 1s, got %s", p.Retention)
	case p.Retention > MaxRetention:
		return fmt.Errorf("retention must be at most %s (100 years), got %s", MaxRetention, p.Retention)
	}
	return p.validateReduceTask()
}

// validateReduceTask returns an error naming the first field of
// ReduceTask that is out of range, or a Reduce set beside it.
func (p Policy) validateReduceTask() error {
	r := p.ReduceTask
	switch {
	case r == nil:
		return nil
	case r.Type == "":
		return errors.New("reduce.task must name the reduce task's type")
	case p.Reduce != "":
		return fmt.Errorf("reduce must be empty with a reduce task, got %q", p.Reduce)
	case r.Queue != "" && protocol.CheckQueueName(r.Queue) != nil:
		return fmt.Errorf("reduce.queue: %v", protocol.CheckQueueName(r.Queue))
	case len(r.Payload) > 0 && !json.Valid(r.Payload):
		return errors.New("reduce.payload must be JSON")
	}
	return nil
}

// Tolerates reports whether failed failures out of expected tasks stay
// within both of the policy's tolerances.
func (p Policy) Tolerates(failed, expected int64) bool {
	if failed <= 0 {
		return true
	}
	if failed > p.ToleratedFailures {
		return false
	}
	if expected <= 0 {
		return false
	}
	// Compare failed/expected*100 <= percent without rounding surprises.
	return float64(failed)*100 <= p.ToleratedFailurePercent*float64(expected)+1e-9
}

// Job is a job as the store records it.
type Job struct {
	ID             string
	Type           string
	State          JobState
	ExpectedTasks  int64
	CompletedTasks int64
	FailedTasks    int64
	Policy         Policy
	Metadata       json.RawMessage
	IdempotencyKey string
	CreatedAt      time.Time
	// StartedAt is when the job's first task started, as its workers
	// reported it (the earliest start an outcome carried): nil until an
	// outcome with a start is recorded, and for a job none of whose
	// outcomes carried one (tasks the broker dead-lettered, tasks the
	// reconciler failed as lost).
	// The job's duration and rate count from it.
	StartedAt *time.Time
	// PublishedAt is when the relay had published every task of the job
	// and the job became running: nil while a task waits to be
	// published. For a large job it is the end of the publishing, not
	// the start of the work: tasks run while it is still publishing.
	PublishedAt *time.Time
	// LastFinishedAt is when the job's latest recorded task outcome
	// finished (the latest finish an outcome carried, or the time the
	// store recorded it): nil before the first. The running job's rate
	// counts up to it (Rate).
	LastFinishedAt *time.Time
	FinishedAt     *time.Time
	// ResultLocation is where the reduced result can be fetched once the
	// job completed; empty before that and for failed jobs.
	ResultLocation string
	// Error summarises why a job failed or was cancelled.
	Error string
	// TraceParent and TraceState are the W3C trace context (traceparent,
	// tracestate) of the request that submitted the job, "" when it had
	// none: the spans of its tasks and its close continue that trace.
	// They are the store's, and not part of the API's JSON.
	TraceParent, TraceState string
	// WebhookURL is where warren POSTs when the job closes ("" for none).
	// The webhook's secret is the store's, never the job's.
	WebhookURL string
	// Version counts the changes to the job's counters and state, as the
	// store read them: a store's FinishJob closes the job only while its
	// version is still the one the close was computed from. It is the
	// store's, and not part of the API's JSON.
	Version int64
	// ReduceState is where the job's reduce task stands (JSON
	// reduce_state): "" when none was started (or a redrive reset it),
	// else ReduceRunning, ReduceCompleted or ReduceFailed. The job stays
	// open (pending or running) while it reduces.
	ReduceState string
	// SpawnedTasks is how many of the job's tasks its tasks spawned (JSON
	// spawned_tasks): they are in ExpectedTasks too, which grows with
	// them in the transaction that records each spawning task's result.
	SpawnedTasks int64
	// Then is the job's follow-up (JSON then), nil for none: the job the
	// store starts, in the transaction that closes this one as completed,
	// with one task per element of its result. Its webhook secret is the
	// store's, never the job's.
	Then *FollowUp
	// NextJob is the id of the follow-up job this one started (JSON
	// next_job), "" until it did; once set it never changes, so that a
	// chain never forks.
	NextJob string
	// PreviousJob is the id of the job whose close started this one (JSON
	// previous_job), "" for the first job of a chain.
	PreviousJob string
	// PausedAt is when the job was paused (JSON paused_at), nil while it
	// is not: no new task of a paused job starts until it is resumed
	// (docs/operations.md, "Pausing a job or a queue"). A paused job
	// stays open, in its state, and may still close when the tasks that
	// were running finish its work.
	PausedAt *time.Time
}

// Paused reports whether the job is paused (Job.PausedAt).
func (j Job) Paused() bool { return j.PausedAt != nil }

// MaxChainLength is the most jobs a chain of follow-ups holds, its first
// job included: a submission whose then nests deeper is refused.
const MaxChainLength = 10

// FollowUp is a job's follow-up (Job.Then): a job without tasks, which
// the store creates when the job completes, with one task per element of
// the job's result (a JSON array), in order.
type FollowUp struct {
	// Type names the handler that runs the follow-up's tasks.
	Type string
	// Policy is the follow-up's reducer, retries, tolerance and the rest
	// of its options.
	Policy Policy
	// Metadata is opaque JSON kept with the follow-up (nil for none).
	Metadata json.RawMessage
	// WebhookURL is the follow-up's own webhook, "" when it inherits the
	// webhook of the job that starts it.
	WebhookURL string
	// Then is the follow-up's own follow-up, nil for none.
	Then *FollowUp
}

// Length is the number of jobs in the chain f starts: f and the
// follow-ups after it.
func (f *FollowUp) Length() int {
	n := 0
	for ; f != nil; f = f.Then {
		n++
	}
	return n
}

// Reducing reports whether the job is open and its reduce task runs.
func (j Job) Reducing() bool {
	return !j.State.Terminal() && j.ReduceState == ReduceRunning
}

// PendingTasks is the number of tasks that have not finished yet.
func (j Job) PendingTasks() int64 {
	return j.ExpectedTasks - j.CompletedTasks - j.FailedTasks
}

// Finished reports whether every task has reached a terminal state.
func (j Job) Finished() bool {
	return j.CompletedTasks+j.FailedTasks >= j.ExpectedTasks
}

// FinishedTasks is the number of tasks that reached a terminal state:
// completed and failed ones (the vocabulary of docs/operations.md:
// "finished" is completed + failed, never completed alone).
func (j Job) FinishedTasks() int64 {
	return j.CompletedTasks + j.FailedTasks
}

// Rate is the job's throughput in finished tasks (FinishedTasks) per
// second, measured from its first task's start (StartedAt): to its close
// (FinishedAt) for a closed job, its whole run; to its latest finish
// (LastFinishedAt) for an open one, so that a job of slow tasks shows
// the pace its tasks finish at, not a rate that falls to zero between
// two outcomes, and a stalled job keeps the rate it had (LastFinishedAt
// says since when). ok is false while it cannot be measured: no start
// reported, no task finished, or no time between them.
func (j Job) Rate() (perSecond float64, ok bool) {
	end := j.LastFinishedAt
	if j.State.Terminal() && j.FinishedAt != nil {
		end = j.FinishedAt
	}
	done := j.FinishedTasks()
	if j.StartedAt == nil || end == nil || done <= 0 || !end.After(*j.StartedAt) {
		return 0, false
	}
	return float64(done) / end.Sub(*j.StartedAt).Seconds(), true
}

// TaskRecord is one task's row in the store, without its payload. Task
// ReduceTaskID is the job's reduce task.
type TaskRecord struct {
	JobID    string
	TaskID   int64
	State    TaskState
	Attempts int
	// Generation is the task's generation: 1 for a new task, one more at
	// each redrive, replay or reconciler requeue (store.Outcome.Generation).
	Generation int
	Worker     string
	Error      string
	QueuedAt   *time.Time
	StartedAt  *time.Time
	FinishedAt *time.Time
	Result     json.RawMessage
}

// AttemptOutcome is how one run of a task ended (TaskAttempt.Outcome).
type AttemptOutcome string

// Attempt outcomes.
const (
	// AttemptCompleted is the run that completed its task.
	AttemptCompleted AttemptOutcome = "completed"
	// AttemptFailed is the run that failed its task for good (retries
	// spent, a permanent error, a dead letter).
	AttemptFailed AttemptOutcome = "failed"
	// AttemptRetried is a run that failed and was retried.
	AttemptRetried AttemptOutcome = "retried"
)

// TaskAttempt is one run of a task as the store keeps it
// (store.Store.TaskAttempts): its number, the generation it ran at, who
// ran it and when, how it ended, and why it failed.
type TaskAttempt struct {
	Attempt    int
	Generation int
	Outcome    AttemptOutcome
	Worker     string
	StartedAt  *time.Time
	FinishedAt time.Time
	// Error is the failure's text (its first store.MaxAttemptErrorBytes).
	Error string
	// Traceback is where the failure came from when the worker sent it
	// (its last store.MaxTracebackBytes); "" otherwise.
	Traceback string
}

// TaskOutcome is one map task's outcome as a reduce task reads it
// (store.Store.ScanOutcomes).
type TaskOutcome struct {
	TaskID int64
	State  TaskState
	// Result is the task's result (completed tasks); nil for none.
	Result json.RawMessage
	// Error is the task's error (failed tasks).
	Error string
}

// TaskError is one failed task and its error, for a job's failure sample.
type TaskError struct {
	TaskID int64
	Error  string
}

// Errors shared by every package. Match them with errors.Is.
var (
	// ErrNotFound means the job (or task) does not exist.
	ErrNotFound = errors.New("warren: not found")
	// ErrConflict means the operation does not fit the job's current state,
	// for example cancelling a closed job.
	ErrConflict = errors.New("warren: conflict with the job's state")
)

// EffectiveQueue returns Queue, or protocol.DefaultQueue when it is empty.
func (p Policy) EffectiveQueue() string { return protocol.QueueOrDefault(p.Queue) }
