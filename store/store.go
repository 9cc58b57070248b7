// Package store defines warren's job store: the one interface behind which
// the SQLite (store/sqlite) and PostgreSQL (store/postgres) implementations
// sit. Both pass the conformance suite in store/storetest.
//
// The store is the single source of truth for a job: its expected,
// completed and failed counters, every task's state, and the outbox (task
// rows in state pending are the tasks not yet published).
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/warrenhq/warren"
)

// Store is the job store. Every method is safe for concurrent use. Methods
// return errors that wrap warren.ErrNotFound or warren.ErrConflict where
// documented.
type Store interface {
	// Migrate applies the embedded schema migrations that are not applied
	// yet. It is safe to call from several processes at once.
	Migrate(ctx context.Context) error
	// Ping checks that the store answers.
	Ping(ctx context.Context) error
	// Close releases the store's connections.
	Close() error
	// Now returns the store's clock: the time it writes (created_at,
	// queued_at, finished_at, a delivery's next attempt) and compares
	// stored times with. On a store shared by several servers it is the
	// database's clock, which they all read alike whatever their own
	// clocks say (within milliseconds), so that a server whose clock is
	// off never takes another's task for lost nor deletes a job early.
	// The times a caller passes for the store to compare with stored ones
	// (Staleness, Expiry, DeliveryClaim, DeliveryAttempt) must be read
	// from it. It may read the database (at most about once a minute),
	// and fails only when the store never could.
	Now(ctx context.Context) (time.Time, error)

	// CreateJob writes the job row and one task row per payload in ONE
	// transaction, consuming tasks as a stream (task ids are positions,
	// 1..N); an empty payload is stored as JSON null. If tasks yields an
	// error, nothing is written and that error is returned. When spec.IdempotencyKey names an existing job, that job is
	// returned with created == false and nothing is written (tasks is not
	// consumed), unless the job was created by another request (another
	// RequestHash, both not empty): ErrKeyReused. A spec that cannot
	// become a job (an invalid policy, warren.Policy.Validate; a webhook
	// without its URL or secret, one too long, or not UTF-8 without NUL)
	// is an error before anything is read or written, whatever its
	// idempotency key (tasks is not consumed). An explicit spec.ID that names a job,
	// or a deleted job whose tasks are not purged yet
	// (PurgeDeletedTasks), is warren.ErrConflict. A spec.Then that cannot
	// become a job either, or a chain longer than warren.MaxChainLength,
	// is refused as an invalid spec is.
	CreateJob(ctx context.Context, spec NewJob, tasks iter.Seq2[json.RawMessage, error]) (job warren.Job, created bool, err error)
	// GetJob returns one job, or an error wrapping warren.ErrNotFound.
	GetJob(ctx context.Context, id string) (warren.Job, error)
	// ListJobs returns jobs newest first, and the cursor of the next page
	// ("" when there is none), filtered as opts says (ListJobsOpts). An
	// invalid opts.Search is an error (ValidateSearch), and so is an
	// invalid cursor.
	ListJobs(ctx context.Context, opts ListJobsOpts) ([]warren.Job, string, error)
	// ListTasks returns a job's tasks in task id order (its reduce task,
	// warren.ReduceTaskID, first), and the cursor of the next page (""
	// when there is none). Unknown job: warren.ErrNotFound.
	ListTasks(ctx context.Context, jobID string, opts ListTasksOpts) ([]warren.TaskRecord, string, error)
	// TaskTimeline counts a job's map tasks that finished (completed or
	// failed; cancelled tasks are not counted, nor is the reduce task, as
	// the job's counters do not count it) by when they finished, in
	// span.N buckets of span.Bucket from span.Start, in order, a task
	// that finished before the span in its first bucket and one after it
	// in its last (span.Index).
	// Unknown job: warren.ErrNotFound.
	TaskTimeline(ctx context.Context, jobID string, span TimelineSpan) ([]TimelineBucket, error)
	// JobErrors returns up to limit failed tasks of a job with their errors,
	// in task id order (a failed reduce task first), limit <= 0 meaning DefaultPageSize as for the list
	// methods. Unknown job: warren.ErrNotFound.
	JobErrors(ctx context.Context, jobID string, limit int) ([]warren.TaskError, error)
	// CountJobs returns the number of jobs in each state; states without
	// jobs may be absent.
	CountJobs(ctx context.Context) (map[warren.JobState]int64, error)
	// Backlog returns the number of tasks waiting in the outbox (pending,
	// of open jobs).
	Backlog(ctx context.Context) (int64, error)
	// OpenQueues returns the work queues of the open jobs
	// (warren.Policy.EffectiveQueue), each once, sorted.
	OpenQueues(ctx context.Context) ([]string, error)
	// CancelJob moves an open job to cancelled, with the error
	// CancelledError, and its unfinished tasks to cancelled, in one
	// transaction, which also makes the job's webhook delivery (a pending
	// Delivery of EventJobClosed, due at once, its body the job as it
	// closed: ClaimedDelivery.Body)
	// when the job has a webhook. A closed job: warren.ErrConflict.
	CancelJob(ctx context.Context, id string) (warren.Job, error)

	// PauseJob pauses an open job: once it returns, no relay round
	// publishes a task of the job (a round in flight is waited for), and
	// ReconcileStale takes none of its queued tasks for lost, until
	// ResumeJob. The job stays in its state; tasks already published are
	// the workers' to hold (docs/operations.md, "Pausing a job or a
	// queue"). It returns the job with PausedAt set; a paused job keeps
	// its first PausedAt. A closed job: warren.ErrConflict. Pausing
	// changes no counter and not the job's Version.
	PauseJob(ctx context.Context, id string) (warren.Job, error)
	// ResumeJob resumes a paused open job: its pending tasks are offered
	// to the relay again, and each of its queued tasks' timeouts
	// (ReconcileStale) counts from the resume, not only from its publish.
	// A job that is not paused is returned unchanged. A closed job:
	// warren.ErrConflict.
	ResumeJob(ctx context.Context, id string) (warren.Job, error)
	// PauseQueue pauses a work queue by its effective name
	// (warren.Policy.EffectiveQueue; "" is protocol.DefaultQueue), with
	// or without jobs: PauseJob for every open job of the queue and
	// every job submitted to it until ResumeQueue. A paused queue keeps
	// its first PausedAt. An invalid queue name is an error.
	PauseQueue(ctx context.Context, queue string) (QueuePause, error)
	// ResumeQueue resumes a paused work queue, as ResumeJob does for its
	// jobs, and reports whether it was paused.
	ResumeQueue(ctx context.Context, queue string) (bool, error)
	// PausedQueues returns the paused work queues, by name.
	PausedQueues(ctx context.Context) ([]QueuePause, error)
	// PausedJobs returns up to limit ids of open paused jobs, those
	// paused first first (limit <= 0 meaning DefaultPageSize, as for the
	// list methods): the server tells the workers of them again and
	// again (docs/protocol.md, "Control messages").
	PausedJobs(ctx context.Context, limit int) ([]string, error)

	// RelayBatch is RelayRound with a round of limit tasks and limit
	// messages (limit <= 0 meaning DefaultPageSize, as for the list
	// methods).
	RelayBatch(ctx context.Context, limit int, publish func(ctx context.Context, tasks []OutboxTask) ([]TaskRef, error)) (int, error)
	// RelayRound claims unpublished (pending) tasks of open jobs, as much
	// as round allows, shared between the jobs (each work queue's room
	// between its jobs in proportion to their priorities, in whole
	// messages of their batch sizes, never more than a job has pending;
	// a job's tasks in task id order; which queue and which job is served
	// first moving by one each round, so that they take turns), and calls
	// publish with them, grouped by job, the jobs in the order the round
	// served them, each task with the batch size the round chose for its
	// job (Round.Batch) and whether the round cut its share
	// (OutboxTask.More).
	// publish returns the tasks whose publishing the broker confirmed;
	// exactly those are marked queued (with their queued_at), and a job
	// whose tasks are all out moves from pending to running. Tasks publish
	// did not return stay pending and are offered again later. The returned
	// count is the number of tasks marked queued.
	//
	// Several relays may call RelayRound at once on a store shared by
	// several processes (PostgreSQL) without being offered the same task.
	RelayRound(ctx context.Context, round Round, publish func(ctx context.Context, tasks []OutboxTask) ([]TaskRef, error)) (int, error)

	// ApplyOutcomes records a batch of task outcomes in ONE transaction.
	// An outcome of a reduce task (warren.ReduceTaskID) is judged as any
	// while its job reduces (warren.Job.ReduceState
	// warren.ReduceRunning), and a duplicate otherwise; applied, it moves
	// no counter but sets the job's ReduceState to its state and lists
	// the job in ReadyToClose.
	// Each outcome is a guarded transition: it changes its task only if the
	// task is not terminal yet, its job is open, and the outcome is of the
	// task's current generation (or of an unknown one, 0: see
	// Outcome.Generation); the job's counters move only when a task row
	// changed. An outcome of another generation is counted as a duplicate.
	// Of several outcomes of one task in a batch, the first that the
	// guard lets through counts. Applying the same outcome twice is a
	// no-op the second time. An outcome without Attempts records at least
	// one (see Outcome.Attempts); one without Worker keeps the task's
	// recorded worker (see Outcome.Worker). Error and Worker are stored as
	// valid UTF-8 without NUL bytes (each run of bytes that is not valid
	// UTF-8, and each NUL, becomes U+FFFD), results byte for byte. A
	// batch with an outcome whose State is neither completed nor failed
	// is an error, and nothing of it is written.
	ApplyOutcomes(ctx context.Context, outcomes []Outcome) (ApplyReport, error)
	// ApplyOutcomesClosing is ApplyOutcomes that also closes, in the same
	// transaction, jobs the batch made ready to close, so that a small
	// job's last outcome and its close cost one commit: each job of
	// ReadyToClose whose tasks are all finished (completed plus failed
	// equal to expected), with at most InlineCloseTasks tasks, no reduce
	// task and no reduce state, is passed to decide, as the batch left it,
	// with a scan of its results inside the transaction (as ScanResults
	// would give them once committed). When decide returns true, the job
	// is closed as FinishJob closes it at that version (a completed job
	// with a follow-up starts it, its webhook delivery is made) and
	// listed in ApplyReport.ClosedJobs, not in ReadyToClose; when it
	// returns false, the job is left for FinishJob, listed in
	// ReadyToClose. An error from decide fails the whole batch: nothing
	// of it is written. decide nil is ApplyOutcomes.
	ApplyOutcomesClosing(ctx context.Context, outcomes []Outcome, decide CloseDecider) (ApplyReport, error)
	// JobsToClose returns up to limit ids of open jobs that are ready to
	// close, or to start their reduce task (ReadyToClose: every task
	// finished, or fail-fast with failures over the tolerance; or the
	// reduce task's outcome recorded), limit <= 0 meaning DefaultPageSize as for the
	// list methods. It finds jobs left half-closed by a crash.
	JobsToClose(ctx context.Context, limit int) ([]string, error)
	// ScanResults calls fn for each map task of a job (never the reduce
	// task) in task id order, with
	// its terminal state and result, streaming (results are never all in
	// memory at once). An error from fn stops the scan and is returned.
	ScanResults(ctx context.Context, jobID string, fn func(taskID int64, state warren.TaskState, result json.RawMessage) error) error
	// FinishJob closes an open job at version (warren.Job.Version, as read
	// when the close was computed): it moves it to state (completed or
	// failed) with finishedAt and errMsg, cancels its tasks that never
	// finished, and, when result is not nil, stores result (byte for byte)
	// and records its location, all in one transaction, which also makes
	// the job's webhook delivery, as CancelJob does; errMsg is stored as
	// Outcome.Error is. It returns false, changing
	// nothing, when the job was already closed or is no longer at version
	// (an outcome, a redrive, a replay or the reconciler moved it since):
	// the caller reads the job again and starts over. Of several
	// concurrent callers at one version exactly one gets true. Any other
	// state than completed or failed is an error
	// that changes nothing, whatever the job: a job is cancelled by
	// CancelJob.
	//
	// Every change to a job's counters, state or reduce state
	// (ApplyOutcomes, ReconcileStale, RelayBatch starting it, StartReduce,
	// RedriveJob, ReopenTasks, UndoReopen, CancelJob, FinishJob)
	// increments its version. FinishJob closes a job whatever its
	// ReduceState.
	//
	// A job closed as completed that has a follow-up (warren.Job.Then)
	// and no warren.Job.NextJob yet starts it in the same transaction: a
	// new job of the follow-up's spec, its PreviousJob this job, with one
	// pending task per element of result, in order, the follow-up's own
	// Then kept for its close, this job's webhook when the follow-up names
	// none, and this job's trace context; this job's NextJob names it.
	// When result is not a JSON array of at least one element, or an
	// element is over the follow-up's MaxTaskBytes or nested deeper than
	// protocol.MaxPayloadDepth, the follow-up is created failed (closed at
	// once, its error saying why, its webhook delivery made) and this job
	// stays completed. A failed job starts nothing, and a job with a
	// NextJob never starts another (a redrive closing it again). The
	// caller learns of the follow-up from the job's NextJob (GetJob).
	FinishJob(ctx context.Context, jobID string, version int64, state warren.JobState, result []byte, errMsg string) (bool, error)
	// StartReduce makes the reduce task of open job jobID pending, if the
	// job is still at version, ready to close (ReadyToClose), has a
	// warren.Policy.ReduceTask, its ReduceState is "", and its failures
	// are within tolerance (warren.Policy.Tolerates): task
	// warren.ReduceTaskID is inserted (generation 1, attempts 0, the
	// ReduceTask's payload, JSON null when it has none) or, when a row is
	// left from an earlier reduce (a redrive), reset (generation+1,
	// attempts 0, pending, its result, error, worker and times cleared);
	// ReduceState becomes warren.ReduceRunning and the version moves, in
	// one transaction. The relay then publishes the reduce task alone
	// (OutboxTask). It returns false, changing nothing, when the job is
	// not so (closed, moved, not ready, over tolerance, reducing already
	// or reduced, without a reduce task). An unknown job:
	// warren.ErrNotFound.
	StartReduce(ctx context.Context, jobID string, version int64) (bool, error)
	// GetTask returns one task's record (task warren.ReduceTaskID is the
	// reduce task); warren.ErrNotFound when the job or the task does not
	// exist.
	GetTask(ctx context.Context, jobID string, taskID int64) (warren.TaskRecord, error)
	// TaskPayload returns one task's payload as it was stored (JSON null
	// for an empty one); warren.ErrNotFound when the job or the task does
	// not exist.
	TaskPayload(ctx context.Context, jobID string, taskID int64) (json.RawMessage, error)
	// TaskAttempts returns the attempts the store kept of one task
	// (ApplyOutcomes: the run of each applied outcome, and each retried
	// run a worker reported, Outcome.Retry), oldest first: at most the
	// last KeepAttempts of them (Outcome.KeepAttempts), each error and
	// traceback within MaxAttemptErrorBytes and MaxTracebackBytes. A map
	// task completed on its first run has that run, from its task row
	// (which is all the store writes for it: no attempt row). A task
	// that never finished a run has none. warren.ErrNotFound when the job
	// or the task does not exist.
	TaskAttempts(ctx context.Context, jobID string, taskID int64) ([]warren.TaskAttempt, error)
	// ScanOutcomes calls fn for each map task of job jobID whose id is
	// above after (0 for all), in task id order, with its state, result
	// and error, never the reduce task; streaming: the outcomes are never
	// all in memory at once. An error from fn stops the scan and is
	// returned as it is. An unknown job: warren.ErrNotFound.
	ScanOutcomes(ctx context.Context, jobID string, after int64, fn func(warren.TaskOutcome) error) error
	// JobResult returns a closed job's stored reduced result. A job without
	// one: warren.ErrNotFound.
	JobResult(ctx context.Context, jobID string) ([]byte, error)
	// JobResultRange returns up to n bytes of a closed job's stored
	// reduced result from offset off (fewer at its end, none past it) and
	// the whole result's size, reading no more of the result than about
	// the range, so that a large result is served in chunks without ever
	// being in memory whole. A job without one: warren.ErrNotFound. A
	// negative off or n is an error.
	JobResultRange(ctx context.Context, jobID string, off, n int64) (chunk []byte, size int64, err error)

	// RedriveJob reopens a closed job that has failed tasks (a failed job,
	// or one completed with tolerated failures) or whose reduce task
	// failed (ReduceState warren.ReduceFailed), in one transaction: its
	// failed map tasks go back to pending with their generation bumped (the
	// relay publishes them again, their attempts kept, so
	// OutboxTask.Attempts continues the count), the
	// failed counter drops by as many, its stored result, result location,
	// error and finished_at are cleared, and it is running again. It
	// returns the reopened job and how many tasks were requeued. A job that
	// is open, cancelled, or has no failed task: warren.ErrConflict. Its
	// ReduceState is reset to "", so that its reduce task runs again
	// (StartReduce) on the new outcomes; the reduce task's row stays as
	// it is until then.
	RedriveJob(ctx context.Context, id string) (warren.Job, int, error)
	// ReopenTasks makes failed tasks of job jobID runnable again, for a
	// dead-letter replay that republishes them itself, in one
	// transaction: each task of taskIDs that is failed becomes queued
	// (queued_at now) with its generation bumped, its attempts reset to 0
	// (the replayed message carries x-retry 0: the task gets 1 +
	// max_retries runs again) and its error, result and run times
	// cleared; the job's failed counter drops by as many; and if the job
	// was closed as failed or completed it reopens as running (result,
	// location, error and finished_at cleared) and the tasks its close
	// cancelled go back to pending at their next generation (they never
	// ran, and the job must be able to close again with every task
	// accounted for). The reduce task (warren.ReduceTaskID) is reopened
	// only for a job closed as failed by it (ReduceState
	// warren.ReduceFailed), and not beside a map task: the job then
	// reopens reducing (ReduceState warren.ReduceRunning). A reopened map
	// task resets a closed job's ReduceState to "", and no map task of an
	// open job whose ReduceState is not "" is reopened (its reduce reads
	// the outcomes as they are). The Reopening lists the tasks reopened, with the
	// generation each replayed message must carry, the task ids the job
	// does not have, and what UndoReopen needs. A task that is not failed
	// is left as it is, and so is every task of a cancelled job. An
	// unknown job: warren.ErrNotFound.
	ReopenTasks(ctx context.Context, jobID string, taskIDs []int64) (Reopening, error)
	// UndoReopen puts back what r, from ReopenTasks, changed, in one
	// transaction, for a replay the broker surely did not take (nacked,
	// returned, never sent), so that a failed replay leaves the store as
	// it was: if r's job is still at r.Version and its reopened tasks
	// still at the generations r gave them, not finished, the tasks are
	// failed again as they were (r's Was), the failed counter rises by
	// as many and, when r reopened a closed job, the tasks its close had
	// cancelled are cancelled again and the job is closed again as it was
	// (state, error, finished_at, result location, stored result),
	// without a new webhook delivery. The generations stay where the
	// reopen put them: a generation is never given twice. It returns
	// true; or false, changing nothing, when the job moved since (an
	// outcome was recorded, it was cancelled, deleted, ...): the caller
	// then records the tasks' failure as outcomes of their generation. An
	// r that reopened nothing changes nothing, and true is returned.
	UndoReopen(ctx context.Context, r Reopening) (bool, error)
	// ReopenTask is ReopenTasks for one task: it returns the task's new
	// generation and true; or false, changing nothing, when the task is
	// not failed or its job is cancelled. Unknown job or task:
	// warren.ErrNotFound.
	ReopenTask(ctx context.Context, jobID string, taskID int64) (generation int, reopened bool, err error)
	// ReconcileStale looks at up to limit tasks of open jobs that are
	// queued (not terminal) and stale at at (limit <= 0 means
	// DefaultPageSize): max(queued_at, at.Busy) is more than their job's
	// task timeout plus at.Grace before at.Now (Staleness). The lost run
	// counts as an attempt: a task whose attempts+1 is at most
	// its job's max_retries goes back to pending with attempts+1 and its
	// generation bumped (the lost copy's outcome, should it come after
	// all, no longer counts), for the relay to publish again (the relay's
	// mark then sets a new queued_at); any other is failed at at.Now with
	// attempts+1 and the error LostError, counted as failed as
	// ApplyOutcomes would (a reduce task failed as lost moves no counter
	// and sets its job's ReduceState to warren.ReduceFailed). Several servers may call it at once without
	// handling a task twice.
	ReconcileStale(ctx context.Context, at Staleness, limit int) (ReconcileReport, error)

	// DeleteExpiredJobs deletes, in one transaction, up to limit closed
	// jobs that have expired at at (Expiry, ExpiresAt), those that
	// expired first first; limit <= 0 means DefaultPageSize. Each job's
	// row, reduced result and idempotency key go at once: every read of
	// the job then answers warren.ErrNotFound, an outcome for one of its
	// tasks is Unknown, and a new submission may use its key. Its task
	// rows are left for PurgeDeletedTasks, which deletes them in batches
	// of its own size, so that a job of any size never holds the store
	// long. Its webhook deliveries go with its row. An open job is never
	// deleted, nor a reopened one (RedriveJob, ReopenTasks): its retention counts again from its next close. It
	// returns how many jobs it deleted. Several servers may call it at
	// once without deleting a job twice.
	DeleteExpiredJobs(ctx context.Context, at Expiry, limit int) (int, error)
	// DeleteJob deletes one closed job now, whatever its retention, as
	// DeleteExpiredJobs deletes an expired one: its row, reduced result
	// and idempotency key at once, its task rows left for
	// PurgeDeletedTasks. An open job: ErrJobOpen (which wraps
	// warren.ErrConflict), and nothing changes; an unknown one (or one
	// deleted already): warren.ErrNotFound.
	DeleteJob(ctx context.Context, id string) error
	// PurgeDeletedTasks deletes, in one transaction, up to limit task
	// rows of jobs that DeleteExpiredJobs or DeleteJob deleted (limit <=
	// 0 means DefaultPageSize), the jobs deleted first first, and returns
	// how many it deleted: fewer than limit when none is left (or, on a
	// store shared by several servers, when the rest are being purged by
	// another). A new job may not take the id of a deleted job until its
	// tasks are purged (CreateJob: warren.ErrConflict). A job's reduce
	// task goes with its last map tasks, which may make a purge delete
	// one row more than limit.
	PurgeDeletedTasks(ctx context.Context, limit int) (int, error)

	// ClaimDeliveries claims up to claim.Limit webhook deliveries that are
	// pending and due at claim.Now (NextAttemptAt not after it), the
	// longest due first: each claimed delivery's Attempts goes up by one
	// and its NextAttemptAt becomes claim.Now+claim.Lease, so that no
	// other claim takes it while its attempt runs, and any claim takes it
	// again should the attempt never be recorded (a crash). Several
	// servers may claim at once on a store shared by several processes
	// (PostgreSQL) without being handed the same delivery.
	ClaimDeliveries(ctx context.Context, claim DeliveryClaim) ([]ClaimedDelivery, error)
	// RecordDeliveryAttempt records how an attempt ended:
	// delivered (at a.At), pending again (due at a.NextAttemptAt, which a
	// pending attempt must give) or failed for good, with its status and
	// error; any other state is an error that changes nothing. It changes the delivery
	// and returns true only while the delivery is pending and its
	// Attempts is still a.Attempt: the record of an attempt whose lease
	// passed and whose delivery another claim took is ignored (false). An
	// unknown delivery (its job deleted since) is false too.
	RecordDeliveryAttempt(ctx context.Context, a DeliveryAttempt) (bool, error)
	// ListDeliveries returns the webhook deliveries of a job, the oldest
	// first. Unknown job: warren.ErrNotFound.
	ListDeliveries(ctx context.Context, jobID string) ([]Delivery, error)
	// PendingDeliveries returns the number of webhook deliveries that are
	// pending (not delivered nor failed yet).
	PendingDeliveries(ctx context.Context) (int64, error)
}

// Staleness says which queued tasks ReconcileStale takes for lost: a task
// is stale when max(queued_at, Busy) plus its job's task timeout
// (warren.Policy.EffectiveTaskTimeout) plus Grace is before Now.
//
// queued_at alone is not enough: a task's message may wait in the queues
// far longer than its task timeout behind a backlog, and nothing is lost
// then. Busy is when the caller last saw a task message waiting: once
// none waits, a task is either held by a worker, which ends its run
// within the task timeout, or lost.
//
// queued_at is the store's clock (Store.Now), written by whichever server
// published the task: Now and Busy must be read from the same clock.
type Staleness struct {
	// Now is the time of the pass, read from Store.Now; tasks failed as
	// lost finish at Now.
	Now time.Time
	// Busy is the latest time a task message may still have been waiting
	// in a queue, read from Store.Now; the zero time means never, so that
	// each task's queued_at alone counts.
	Busy time.Time
	// Grace is added to every job's task timeout: the time a result may
	// take to be recorded after its run's deadline.
	Grace time.Duration
}

// QueuePause is a paused work queue (Store.PauseQueue).
type QueuePause struct {
	// Queue is the queue's name (warren.Policy.EffectiveQueue).
	Queue string
	// PausedAt is when it was paused.
	PausedAt time.Time
}

// ReconcileReport says what ReconcileStale did.
type ReconcileReport struct {
	// Requeued counts tasks sent back to the outbox.
	Requeued int
	// Failed counts tasks failed as lost.
	Failed int
	// ReadyToClose lists jobs that failing tasks made ready to close
	// (ReadyToClose, which did not hold before the pass), each once: a
	// job is listed once, by the pass or the batch that made it ready.
	ReadyToClose []string
}

// NewJob is a job to create, without its tasks.
type NewJob struct {
	// ID is the job's id; CreateJob generates a ULID when it is empty.
	ID string
	// Type names the handler that runs the job's tasks.
	Type string
	// Policy is the job's reducer, retries and tolerance.
	Policy warren.Policy
	// Metadata is opaque JSON kept with the job (nil for none).
	Metadata json.RawMessage
	// IdempotencyKey, when not empty, makes a repeated submission return
	// the job created first.
	IdempotencyKey string
	// Webhook, when not nil, is POSTed to when the job closes
	// (CreateJob: a URL and a secret, within MaxWebhookURLBytes and
	// MaxWebhookSecretBytes). Whether its address may be reached is the
	// caller's to check.
	Webhook *Webhook
	// RequestHash is a digest of the submission (the API hashes the
	// request's body), kept with the job. A replay with the same
	// IdempotencyKey and another RequestHash is refused with
	// ErrKeyReused; an empty one on either side matches anything.
	RequestHash string
	// Then, when not nil, is the job's follow-up (warren.Job.Then): a
	// job of its Type, Policy, Metadata, Webhook (nil: this job's) and
	// Then, which FinishJob creates when this job completes, one task per
	// element of its result. Its ID, IdempotencyKey, RequestHash and trace
	// context must be empty (the follow-up gets a new id and this job's
	// trace context), and the chain, this job included, holds at most
	// warren.MaxChainLength jobs.
	Then *NewJob
	// MaxTaskBytes, on a Then, is the most bytes a task payload made from
	// an element of the previous job's result may have (the API's
	// per-task limit at submission); 0 means no limit but the wire
	// protocol's depth (protocol.MaxPayloadDepth).
	MaxTaskBytes int64
	// MaxTasks, on a Then, is the most tasks the follow-up may have (the
	// server's per-job limit, server.Config.MaxJobTasks): a result of more
	// elements creates the follow-up failed, as one over MaxTaskBytes
	// does; 0 means no limit.
	MaxTasks int64
	// TraceParent and TraceState are the W3C trace context (traceparent,
	// tracestate) of the span that submitted the job, kept with it so that
	// the relay publishes its tasks in that trace, however much later and
	// from whichever server; "" when it was submitted outside any trace.
	TraceParent, TraceState string
}

// ListJobsOpts filters and pages ListJobs.
type ListJobsOpts struct {
	// State keeps only jobs in that state when not empty.
	State warren.JobState
	// Type keeps only jobs of that type (warren.Job.Type, exactly) when
	// not empty.
	Type string
	// Queue keeps only jobs of that work queue
	// (warren.Policy.EffectiveQueue, exactly: protocol.DefaultQueue names
	// the jobs that give none) when not empty.
	Queue string
	// Search, when not empty, keeps only the jobs it finds, the same on
	// every store:
	//
	//   - the job's id, by prefix (case-sensitive, as ids are);
	//   - the job's type and work queue (warren.Policy.EffectiveQueue),
	//     and the scalar values of its metadata (strings, numbers,
	//     booleans, at any depth; not the keys), the first
	//     MaxSearchTextBytes of them;
	//   - the job's error (warren.Job.Error) and the stored error of each
	//     of its tasks (warren.TaskRecord.Error: a task's last error),
	//
	// the last three as substrings, ignoring the case of letters. It
	// combines with the other filters; the matches come newest first and
	// page with the cursor as every listing does. It must hold
	// MinSearchRunes to MaxSearchBytes of UTF-8 without control
	// characters (ValidateSearch).
	Search string
	// CreatedAfter, when not zero, keeps only jobs created at or after
	// it; CreatedBefore, when not zero, only jobs created before it: the
	// range is half-open, so adjacent ranges never share a job.
	CreatedAfter, CreatedBefore time.Time
	// Limit is the page size; <= 0 means DefaultPageSize.
	Limit int
	// Cursor is a next cursor from a previous page, or "".
	Cursor string
}

// MinSearchRunes is the fewest characters ListJobsOpts.Search may have:
// the stores index substrings by trigrams, which a shorter text cannot
// use.
const MinSearchRunes = 3

// MaxSearchBytes is the most bytes ListJobsOpts.Search may have.
const MaxSearchBytes = 200

// MaxSearchTextBytes is how much of a job's type, queue and metadata
// values the stores index for ListJobsOpts.Search: the values past it
// are not found.
const MaxSearchTextBytes = 4096

// ValidateSearch reports what is wrong with a ListJobsOpts.Search text:
// nil for "" or a valid one; an error naming the rule otherwise. A store
// refuses an invalid text with that error (ListJobs).
func ValidateSearch(q string) error {
	switch {
	case q == "":
		return nil
	case !utf8.ValidString(q) || strings.ContainsFunc(q, unicode.IsControl):
		return errors.New("search text must be UTF-8 without control characters")
	case len(q) > MaxSearchBytes:
		return fmt.Errorf("search text must be at most %d bytes; got %d", MaxSearchBytes, len(q))
	case utf8.RuneCountInString(q) < MinSearchRunes:
		return fmt.Errorf("search text must have at least %d characters; got %q", MinSearchRunes, q)
	}
	return nil
}

// ListTasksOpts filters and pages ListTasks.
type ListTasksOpts struct {
	// State keeps only tasks in that state when not empty.
	State warren.TaskState
	// Limit is the page size; <= 0 means DefaultPageSize.
	Limit int
	// Cursor is a next cursor from a previous page, or "".
	Cursor string
}

// DefaultPageSize is the page size of the list methods, and of the other
// methods whose doc says so, when the caller gives none (a limit <= 0).
const DefaultPageSize = 100

// TaskRef names one task.
type TaskRef struct {
	JobID  string
	TaskID int64
}

// OutboxTask is an unpublished task with what its message needs. A reduce
// task (TaskID warren.ReduceTaskID) has its ReduceTask's Type, the
// reduce queue (warren.Policy.ReduceQueue) and BatchSize 1: it travels
// alone in its message, never batched with another task.
type OutboxTask struct {
	JobID   string
	TaskID  int64
	Type    string
	Payload json.RawMessage
	// MaxRetries is the job's retry budget, carried in the task message.
	MaxRetries int
	// Attempts is how many runs the task has already had (0 for a new
	// task; more after a redrive).
	Attempts int
	// BatchSize is how many consecutive tasks of the job the relay may
	// send as one message (at least 1): the job's warren.Policy.BatchSize,
	// or the size the round chose for a job that leaves it to warren
	// (Round.Batch).
	BatchSize int
	// Generation is the task's generation (1 for a new task), which its
	// message carries and its outcomes report (Outcome.Generation).
	Generation int
	// TaskTimeout is the job's task timeout
	// (warren.Policy.EffectiveTaskTimeout: the default when the job gives
	// none), which its message carries as the limit of each run.
	TaskTimeout time.Duration
	// Queue is the job's work queue (warren.Policy.EffectiveQueue); for
	// its reduce task, the reduce task's (warren.Policy.ReduceQueue).
	Queue string
	// ExpectedTasks is the job's number of map tasks on its reduce task
	// (TaskID warren.ReduceTaskID), which the task message carries; 0 on
	// every other task.
	ExpectedTasks int64
	// TraceParent and TraceState are the job's trace context
	// (NewJob.TraceParent, NewJob.TraceState), "" when it has none.
	TraceParent, TraceState string
	// More reports that the round cut the job's share: the job had
	// pending tasks beyond those the round offered of it. A short last
	// batch of such a job may wait for a later round, to go out whole
	// with the tasks after it; a job with More false was offered every
	// task it had pending.
	More bool
}

// Ref returns the task's reference.
func (t OutboxTask) Ref() TaskRef { return TaskRef{JobID: t.JobID, TaskID: t.TaskID} }

// Outcome is one task's terminal outcome as reported by a worker or by the
// dead-letter queue.
type Outcome struct {
	JobID  string
	TaskID int64
	// State is warren.TaskCompleted or warren.TaskFailed.
	State warren.TaskState
	// Result is the handler's result (completed tasks).
	Result json.RawMessage
	// Error is the failure's text (failed tasks). The store keeps it as
	// valid UTF-8 without NUL bytes (ApplyOutcomes).
	Error string
	// Attempts is the number of runs the task had, when known (> 0). 0
	// means unknown: the store keeps the task's recorded attempts, but
	// records at least 1, since the task ran to produce this outcome.
	Attempts int
	// Traceback is where the failure came from, when the worker sent it
	// (a Python traceback, a Go panic's stack): kept with the outcome's
	// attempt (TaskAttempts), its last MaxTracebackBytes.
	Traceback string
	// Retry marks the outcome of a run that failed and is retried (State
	// failed, with its Error and Attempts): it records that attempt
	// (TaskAttempts) and nothing else, the task staying open and no
	// counter moving. It is recorded when its task exists at its
	// Generation (or 0), whatever the task's state, once (a repeat is a
	// no-op); otherwise it is ignored (ApplyReport.AttemptsIgnored), never
	// Unknown.
	Retry bool
	// KeepAttempts, when > 0, is how many attempts of the task the store
	// keeps (the last ones); 0 means DefaultKeepAttempts.
	KeepAttempts int
	// Worker names the worker that ran the task, when known. "" means
	// unknown (a dead letter, say): the store keeps the task's recorded
	// worker, as it keeps its attempts.
	Worker     string
	StartedAt  *time.Time
	FinishedAt *time.Time
	// Generation is the generation of the task's message that produced
	// this outcome (OutboxTask.Generation, carried by its messages). An
	// outcome of another generation than the task's current one (a copy
	// from before a redrive, a replay or the reconciler's requeue) changes
	// nothing. 0 means unknown (a worker that copies no header): the
	// outcome is applied as one of the current generation.
	Generation int
	// Spawn are the payloads of the tasks a completed outcome adds to its
	// job (spawned tasks), in order. They are written, as pending tasks
	// with the job's next task ids, in the transaction that records the
	// outcome, and only if it records it completed: a duplicate, a stale
	// generation, an outcome of a closed job and a failed outcome add
	// nothing. A spawn the limits below refuse, a payload that is not
	// JSON, and a spawn of a reduce task record the outcome failed,
	// with an error that says why, and add nothing.
	Spawn []json.RawMessage
	// MaxJobTasks, when > 0, is the most tasks a spawn may take the job
	// to (its expected_tasks after the spawn).
	MaxJobTasks int64
	// MaxTaskBytes, when > 0, is the largest payload a spawned task may
	// have, in bytes.
	MaxTaskBytes int64
	// SpawnParts, when not 0, makes the outcome part SpawnPart
	// (1..SpawnParts) of a spawn too large for one message, of the run
	// SpawnRun (protocol.Result.SpawnParts): ApplyOutcomes stages it, and
	// records the outcome of the last part (its Result and the fields
	// above) with every part's Spawn in part order, in the transaction
	// that has every part, as one outcome. A part of a task that is not
	// open at its generation, or of a closed or unknown job, is judged as
	// any outcome is, and stages nothing.
	SpawnRun              string
	SpawnPart, SpawnParts int
}

// DefaultKeepAttempts is how many attempts of each task the store keeps
// (the last ones) when an outcome does not say (Outcome.KeepAttempts):
// enough for a task retried at every tier of a default policy, few enough
// that a task failing for ever costs a bounded number of rows.
const DefaultKeepAttempts = 20

// MaxAttemptErrorBytes is the most of an attempt's error the store keeps
// (its first bytes, cut at a character's boundary): the task's own error
// (warren.TaskRecord.Error) is kept whole, as before.
const MaxAttemptErrorBytes = 8 << 10

// MaxTracebackBytes is the most of an attempt's traceback the store keeps
// (its last bytes, where the failure is, cut at a character's boundary);
// protocol.MaxTracebackBytes is what a worker sends, the same.
const MaxTracebackBytes = 16 << 10

// CloseListener is implemented by a store that several servers share and
// that can tell each of them at once of the jobs any of them closed or
// cancelled (PostgreSQL: LISTEN and NOTIFY). ListenClosed calls fn with
// the id of each such job as its transaction commits, until ctx is done,
// and then returns nil; it listens again by itself after a lost
// connection, a close in between going unreported (the event streams'
// next poll sees it). fn must not block.
type CloseListener interface {
	ListenClosed(ctx context.Context, fn func(jobID string)) error
}

// InlineCloseTasks is the most tasks a job closed by ApplyOutcomesClosing
// may have: its reducer runs inside the transaction that records
// outcomes, and a bigger job's reduce would hold that transaction (and,
// on SQLite, every writer) for as long as it reads its results.
const InlineCloseTasks = 1000

// ResultScan calls fn for each map task of one job in task id order, with
// its terminal state and result, as Store.ScanResults does; an error from
// fn stops it and is returned.
type ResultScan func(fn func(taskID int64, state warren.TaskState, result json.RawMessage) error) error

// CloseDecider decides, for ApplyOutcomesClosing, how job closes (its
// reducer run over scan), or that it is not to be closed there (false).
// An error is the store's (scan failing): the batch fails with it.
type CloseDecider func(ctx context.Context, job warren.Job, scan ResultScan) (Closing, bool, error)

// Closing is how a job closes: State completed or failed, the reduced
// Result (nil for none) and the Error of a failed job, as FinishJob takes
// them.
type Closing struct {
	State  warren.JobState
	Result []byte
	Error  string
}

// ClosedJob is a job ApplyOutcomesClosing closed: Job as the batch left
// it before its close (its counters final), and how it closed.
type ClosedJob struct {
	Job   warren.Job
	State warren.JobState
	Error string
}

// ApplyReport says what ApplyOutcomes did with each outcome of a batch.
type ApplyReport struct {
	// Applied counts outcomes that moved their task to a terminal state.
	Applied int
	// AppliedFailed counts the applied outcomes that failed their task
	// (the rest of Applied completed theirs).
	AppliedFailed int
	// Duplicates counts outcomes for tasks that were already terminal, and
	// outcomes of another generation than their task's.
	Duplicates int
	// Closed counts outcomes for jobs that are already closed.
	Closed int
	// Attempts counts the retried runs the batch recorded (Outcome.Retry),
	// and AttemptsIgnored those it did not: of an unknown task, or of
	// another generation than their task's.
	Attempts, AttemptsIgnored int
	// Spawned counts the tasks the batch's applied outcomes added to
	// their jobs (Outcome.Spawn).
	Spawned int
	// SpawnedJobs lists the jobs that got spawned tasks, each once, in
	// job id order: their relay has new pending tasks.
	SpawnedJobs []string
	// SpawnRefused counts the applied outcomes recorded failed because
	// their spawn was refused (over a limit, not JSON, of a reduce task).
	SpawnRefused int
	// SpawnPartsStaged counts the spawn parts (Outcome.SpawnParts) the
	// batch staged, their outcome not complete yet.
	SpawnPartsStaged int
	// Unknown lists the indexes (in the outcomes slice) of outcomes whose
	// job or task does not exist; nothing was recorded for them.
	Unknown []int
	// ReadyToClose lists the jobs this batch made ready to close
	// (ReadyToClose, which did not hold before the batch), each once: a
	// job is listed once, by the batch that made it ready, however many
	// batches touch it afterwards.
	ReadyToClose []string
	// ClosedJobs lists the jobs ApplyOutcomesClosing closed in the batch's
	// transaction, in the order of ReadyToClose (ApplyOutcomes: none).
	ClosedJobs []ClosedJob
	// Unfinished maps each job whose counters the batch moved to the
	// tasks it still has that are not finished (expected less completed
	// and failed), as the batch left it: ApplyOutcomesClosing reports it,
	// ApplyOutcomes leaves it nil.
	Unfinished map[string]int64
}
