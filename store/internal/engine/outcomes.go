package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// OutcomeTx holds the primitives that record outcomes (ApplyOutcomes),
// and BumpCounters, which every tree that moves a job's counters shares.
type OutcomeTx interface {
	// LockOutcomeTasks locks the task rows of refs (distinct refs; the
	// ids of any task or job, existing or not) and reads them, then reads
	// the states of their jobs. A driver that locks rows locks these in
	// (job_id, task_id) order and reads the jobs only once it holds them,
	// without locking them: closing a job cancels, and so locks, every
	// task that is not finished, so a job read open stays open while the
	// transaction holds its open tasks. A task or a job that does not
	// exist is absent from what it returns; jobs maps a job id to its
	// state and reduce state.
	LockOutcomeTasks(ctx context.Context, refs []store.TaskRef) (tasks []OutcomeTask, jobs map[string]OutcomeJob, err error)
	// WriteOutcomes writes each of writes to its task row, if the row is
	// still open (pending or queued) at the write's Generation, then
	// applies deltas as BumpCounters does, then records attempts (an
	// AttemptWrite's rules: a repeat at the same or an earlier generation
	// is a no-op, a later one replaces the row, then its PruneThrough),
	// pipelined with the writes where the driver can. Any of the three
	// may be empty. It returns how many task rows it wrote, and the job
	// rows as the deltas left them, in job id order.
	WriteOutcomes(ctx context.Context, writes []TaskWrite, deltas []CounterDelta, attempts []AttemptWrite) (int, []warren.Job, error)
	// BumpCounters adds each delta to its job's completed, failed and
	// expected counters (a delta may be negative: a redrive takes failed
	// tasks back), sets its reduce_state to the delta's ReduceState when that is
	// not "", its started_at to the delta's Started when that is earlier
	// and its last_finished_at to the delta's Finished when that is later
	// (or the job has none), and increments the job's version, one job row at a time in
	// job id order (PostgreSQL's lock order for job rows), whatever the
	// order of deltas. It returns the updated job rows in that order. A
	// delta of zero still increments the version: leave such deltas out.
	// A job that does not exist is an error. The decision of what the
	// new counters mean (becameReady) is the caller's.
	BumpCounters(ctx context.Context, deltas []CounterDelta) ([]warren.Job, error)
}

// CloseCandidateReader reads JobsToClose's candidates outside any write
// transaction (SQLite's read pool, PostgreSQL's pool), so that looking
// for half-closed jobs never holds the writer; it is part of a Driver's
// Executor.
type CloseCandidateReader interface {
	// CloseCandidates returns up to limit open jobs, oldest first, that
	// may be ready to close: every task finished, or fail-fast with at
	// least one failure (store.ReadyToClose decides; the tolerance is
	// not in SQL). It starts after the cursor after ("" for the first
	// page) and returns the cursor that continues after the last job it
	// returned. The cursor is the driver's own.
	CloseCandidates(ctx context.Context, after string, limit int) (jobs []warren.Job, next string, err error)
}

// OutcomeJob is a job as LockOutcomeTasks read it: what judging its
// outcomes needs.
type OutcomeJob struct {
	State warren.JobState
	// ReduceState is the job's warren.Job.ReduceState.
	ReduceState string
}

// OutcomeTask is a task row as LockOutcomeTasks read it: what judging an
// outcome and defaulting its fields needs.
type OutcomeTask struct {
	store.TaskRef
	State      warren.TaskState
	Generation int
	Attempts   int
	Worker     string
	StartedAt  *time.Time
}

// TaskWrite is the task row an applied outcome leaves, every field final.
type TaskWrite struct {
	store.TaskRef
	// Generation is the generation the row was read at: the write's
	// guard, with the row still open.
	Generation int
	State      warren.TaskState
	// Result is stored byte for byte; nil stores none.
	Result     []byte
	Error      string
	Attempts   int
	Worker     string
	StartedAt  *time.Time
	FinishedAt time.Time
}

// CounterDelta is how many tasks to add to one job's completed and failed
// counters (and to its expected tasks: a spawn), and the reduce state an
// outcome of its reduce task leaves.
type CounterDelta struct {
	JobID             string
	Completed, Failed int64
	// Expected is how many tasks to add to the job's expected_tasks: the
	// tasks its applied outcomes spawned.
	Expected int64
	// ReduceState, when not "", is the job's new reduce_state: the
	// outcome of its reduce task (warren.ReduceCompleted or
	// warren.ReduceFailed), which moves no counter.
	ReduceState string
	// Started, when not nil, is the earliest start the applied outcomes
	// of the job reported: the job's started_at becomes it if the job
	// has none yet or a later one (warren.Job.StartedAt).
	Started *time.Time
	// Finished, when not nil, is the latest finish of the applied
	// outcomes of the job: the job's last_finished_at becomes it if that
	// is later (warren.Job.LastFinishedAt).
	Finished *time.Time
}

// ApplyOutcomes records a batch of outcomes in one transaction, as
// store.Store's ApplyOutcomes promises: it locks and reads the batch's
// task rows and their jobs' states, judges every outcome in batch order
// (judgeOutcomes), writes the applied ones with the fields outcomeWrite
// makes final and moves each job's counters once, then lists the jobs
// the new counters made ready to close (becameReady). On
// PostgreSQL that is two round trips between BEGIN and COMMIT, whatever
// the batch's size.
//
// An outcome whose State is neither completed nor failed fails the whole
// batch before anything is read.
func (e *Engine) ApplyOutcomes(ctx context.Context, outcomes []store.Outcome) (store.ApplyReport, error) {
	return e.ApplyOutcomesClosing(ctx, outcomes, nil)
}

// ApplyOutcomesClosing is ApplyOutcomes that closes, in its transaction,
// the jobs it made ready that decide closes (store.Store's
// ApplyOutcomesClosing; closeInline).
func (e *Engine) ApplyOutcomesClosing(ctx context.Context, outcomes []store.Outcome, decide store.CloseDecider) (store.ApplyReport, error) {
	if err := validateOutcomes(outcomes); err != nil {
		return store.ApplyReport{}, e.errorf(err, "apply outcomes")
	}
	if len(outcomes) == 0 {
		return store.ApplyReport{}, nil
	}
	outcomes = sanitizeOutcomes(outcomes)
	var report store.ApplyReport
	err := e.inTx(ctx, func(tx Tx) error {
		tasks, jobs, err := tx.LockOutcomeTasks(ctx, distinctRefs(outcomes))
		if err != nil {
			return fmt.Errorf("lock tasks: %w", err)
		}
		// Only a batch with spawn parts reads staged ones.
		var (
			skip  []int
			parts *partPlan
		)
		if hasSpawnParts(outcomes) {
			if outcomes, skip, parts, err = assembleParts(ctx, tx, outcomes, tasks, jobs); err != nil {
				return err
			}
		}
		// Only a batch that spawns reads (and locks) its spawning jobs'
		// last task ids: one without costs what it did before spawns.
		var last map[string]int64
		if ids := spawningJobs(outcomes, jobs); len(ids) > 0 {
			if last, err = tx.LockSpawningJobs(ctx, ids); err != nil {
				return fmt.Errorf("lock spawning jobs: %w", err)
			}
		}
		j := judgeOutcomes(outcomes, skip, tasks, jobs, last, e.now())
		report = j.report
		if parts != nil {
			if err := settleParts(ctx, tx, parts, j.writes); err != nil {
				return err
			}
		}
		if len(j.writes) == 0 && len(j.attempts) == 0 {
			return nil
		}
		n, bumped, err := tx.WriteOutcomes(ctx, j.writes, j.deltas, distinctAttempts(j.attempts))
		if err != nil {
			return fmt.Errorf("record tasks: %w", err)
		}
		// The rows are locked (or the writer is this transaction alone)
		// and were judged open at these generations: a row the guard
		// skipped means a driver broke that promise, and the batch must
		// not count it.
		if n != len(j.writes) {
			return fmt.Errorf("record tasks: %d of %d locked task rows changed", n, len(j.writes))
		}
		if len(j.writes) == 0 {
			return nil // attempts alone: no job moved
		}
		if len(j.children) > 0 {
			if err := tx.InsertSpawned(ctx, j.children); err != nil {
				return fmt.Errorf("spawn tasks: %w", err)
			}
		}
		report.ReadyToClose = readyAfter(bumped, j.deltas)
		if decide == nil {
			return nil
		}
		report.Unfinished = make(map[string]int64, len(bumped))
		for _, b := range bumped {
			report.Unfinished[b.ID] = max(b.ExpectedTasks-b.CompletedTasks-b.FailedTasks, 0)
		}
		if len(report.ReadyToClose) > 0 {
			report.ReadyToClose, report.ClosedJobs, err = closeInline(ctx, tx, bumped, report.ReadyToClose, decide, e.now())
		}
		return err
	})
	if err != nil {
		return store.ApplyReport{}, e.errorf(err, "apply outcomes")
	}
	return report, nil
}

// closeInline closes, in tx, the jobs of ready (read as bumped) that
// ApplyOutcomesClosing may close and decide closes, and returns the jobs
// still ready to close and those it closed. Only a job whose tasks are
// all finished qualifies: closing it cancels no task, so it takes no
// task row lock after the job rows the batch holds (the lock order of
// store/postgres).
func closeInline(ctx context.Context, tx Tx, bumped []warren.Job, ready []string, decide store.CloseDecider, at time.Time) (left []string, closed []store.ClosedJob, err error) {
	byID := make(map[string]warren.Job, len(bumped))
	for _, j := range bumped {
		byID[j.ID] = j
	}
	for _, id := range ready {
		j := byID[id]
		if !inlineClosable(j) {
			left = append(left, id)
			continue
		}
		scan := func(fn func(taskID int64, state warren.TaskState, result json.RawMessage) error) error {
			return tx.ScanResults(ctx, id, fn)
		}
		c, ok, err := decide(ctx, j, scan)
		if err != nil {
			return nil, nil, fmt.Errorf("close job %s: %w", id, err)
		}
		if !ok {
			left = append(left, id)
			continue
		}
		if err := validateFinishState(c.State); err != nil {
			return nil, nil, fmt.Errorf("close job %s: %w", id, err)
		}
		c.Error = storedText(c.Error)
		// Every task of the job is finished (inlineClosable): nothing to
		// cancel.
		done, err := finishInTx(ctx, tx, id, j.Version, c, at, false)
		if err != nil {
			return nil, nil, fmt.Errorf("close job %s: %w", id, err)
		}
		if !done {
			// The batch holds the job's row at this version: a close
			// that did not apply means a driver broke that promise.
			return nil, nil, fmt.Errorf("close job %s: the job moved from version %d inside the batch", id, j.Version)
		}
		closed = append(closed, store.ClosedJob{Job: j, State: c.State, Error: c.Error})
	}
	return left, closed, nil
}

// inlineClosable reports whether ApplyOutcomesClosing may close job j
// (store.Store's ApplyOutcomesClosing).
func inlineClosable(j warren.Job) bool {
	return j.ID != "" && !j.State.Terminal() && j.Policy.ReduceTask == nil && j.ReduceState == "" &&
		j.ExpectedTasks <= store.InlineCloseTasks && j.CompletedTasks+j.FailedTasks == j.ExpectedTasks
}

// distinctRefs lists the tasks of outcomes once each, in first-seen order.
func distinctRefs(outcomes []store.Outcome) []store.TaskRef {
	refs := make([]store.TaskRef, 0, len(outcomes))
	seen := make(map[store.TaskRef]bool, len(outcomes))
	for _, o := range outcomes {
		ref := store.TaskRef{JobID: o.JobID, TaskID: o.TaskID}
		if !seen[ref] {
			seen[ref] = true
			refs = append(refs, ref)
		}
	}
	return refs
}

// judgement is what judgeOutcomes decided for a batch.
type judgement struct {
	// report is the batch's report, without ReadyToClose.
	report store.ApplyReport
	// writes are the task rows the applied outcomes leave.
	writes []TaskWrite
	// deltas are the counters to move, in job id order, none zero.
	deltas []CounterDelta
	// children are the task rows the applied outcomes spawn, in batch
	// order, each job's ids consecutive from its last task id.
	children []SpawnedTask
	// attempts are the attempt rows of the applied outcomes' runs and of
	// the retried runs the batch reports (store.Outcome.Retry).
	attempts []AttemptWrite
}

// judgeOutcomes decides each outcome in batch order from its task row and
// its job's state, as read and locked: Unknown when either is missing
// (a task id outside the job has no row), Closed when the job is closed,
// Duplicate when the task is already terminal (also by an earlier outcome
// of this batch), the outcome's generation is neither 0 nor the task's,
// or it is of the reduce task (warren.ReduceTaskID) of a job that is not
// reducing (a stale copy: its ReduceState is not warren.ReduceRunning),
// else Applied. An applied outcome of a map task moves its job's
// counters; one of the reduce task moves none and sets the job's reduce
// state to its own state. Of several outcomes of one task in a batch,
// the first that is applied is the only one: the task is terminal after
// it.
//
// An applied completed outcome with a spawn (store.Outcome.Spawn) adds
// its tasks with the ids after its job's last one (last, read under the
// job's lock; it moves on with each spawn, so spawns of one job in a
// batch get consecutive ranges in batch order) and raises the job's
// expected tasks by as many; one whose spawn refuseSpawn refuses is
// recorded failed with refuseSpawn's reason instead, and adds nothing.
//
// An outcome that skip (nil for none) marks as a spawn part that was
// staged, or already was (assembleParts), is counted as such and judged
// no further.
//
// A retried run's outcome (store.Outcome.Retry) leaves an attempt row
// only, when its task exists at its generation (or it gives none),
// whatever the task's state or its job's; it is ignored otherwise. An
// applied outcome leaves the attempt row of its run too (terminalAttempt).
func judgeOutcomes(outcomes []store.Outcome, skip []int, tasks []OutcomeTask, jobs map[string]OutcomeJob, last map[string]int64, now time.Time) judgement {
	// The rows are copied: an applied outcome marks its row terminal for
	// the outcomes after it, not the caller's.
	rows := make(map[store.TaskRef]*OutcomeTask, len(tasks))
	for _, task := range tasks {
		rows[task.TaskRef] = &task
	}
	var (
		j      judgement
		counts = make(map[string]*CounterDelta)
	)
	if last == nil {
		last = make(map[string]int64)
	}
	for i, o := range outcomes {
		if skip != nil && skip[i] != partJudged {
			if skip[i] == partStaged {
				j.report.SpawnPartsStaged++
			} else {
				j.report.Duplicates++
			}
			continue
		}
		job, jobFound := jobs[o.JobID]
		task := rows[store.TaskRef{JobID: o.JobID, TaskID: o.TaskID}]
		reduce := o.TaskID == warren.ReduceTaskID
		if o.Retry {
			if !jobFound || task == nil || (o.Generation != 0 && o.Generation != task.Generation) {
				j.report.AttemptsIgnored++
				continue
			}
			j.attempts = append(j.attempts, retryAttempt(o, *task, now))
			j.report.Attempts++
			continue
		}
		switch {
		case !jobFound || task == nil:
			j.report.Unknown = append(j.report.Unknown, i)
		case job.State.Terminal():
			j.report.Closed++
		case task.State.Terminal() || (o.Generation != 0 && o.Generation != task.Generation),
			reduce && job.ReduceState != warren.ReduceRunning:
			j.report.Duplicates++
		default:
			w := outcomeWrite(o, *task, now)
			var spawned int64
			if spawns(o) {
				if why := refuseSpawn(o, last[o.JobID]); why != "" {
					w.State, w.Result, w.Error = warren.TaskFailed, nil, why
					j.report.SpawnRefused++
				} else {
					j.children = spawnedTasks(j.children, o, last[o.JobID])
					spawned = int64(len(o.Spawn))
					last[o.JobID] += spawned
				}
			}
			j.writes = append(j.writes, w)
			if keepsRow(w) {
				j.attempts = append(j.attempts, terminalAttempt(o, w))
			}
			task.State = w.State
			j.report.Applied++
			if w.State == warren.TaskFailed {
				j.report.AppliedFailed++
			}
			d := counts[o.JobID]
			if d == nil {
				d = &CounterDelta{JobID: o.JobID}
				counts[o.JobID] = d
			}
			d.Expected += spawned
			if w.StartedAt != nil && (d.Started == nil || w.StartedAt.Before(*d.Started)) {
				d.Started = w.StartedAt
			}
			if d.Finished == nil || w.FinishedAt.After(*d.Finished) {
				finished := w.FinishedAt
				d.Finished = &finished
			}
			switch {
			case reduce:
				d.ReduceState = string(w.State)
			case w.State == warren.TaskCompleted:
				d.Completed++
			default:
				d.Failed++
			}
		}
	}
	for _, d := range counts {
		j.deltas = append(j.deltas, *d)
		if d.Expected > 0 {
			j.report.Spawned += int(d.Expected)
			j.report.SpawnedJobs = append(j.report.SpawnedJobs, d.JobID)
		}
	}
	slices.SortFunc(j.deltas, func(a, b CounterDelta) int { return cmp.Compare(a.JobID, b.JobID) })
	slices.Sort(j.report.SpawnedJobs)
	return j
}

// outcomeWrite is the task row that applied outcome o leaves, from the
// row as it was read. What o does not know keeps the row's value: its
// attempts when o's are 0, but at least 1, since the task ran to produce
// o; its worker when o names none; its started_at when o has none. A
// finish time o lacks is now, the time the store recorded it.
func outcomeWrite(o store.Outcome, row OutcomeTask, now time.Time) TaskWrite {
	w := TaskWrite{TaskRef: row.TaskRef, Generation: row.Generation, State: o.State, Error: o.Error,
		Attempts: o.Attempts, Worker: o.Worker, StartedAt: o.StartedAt, FinishedAt: now}
	if len(o.Result) > 0 {
		w.Result = o.Result
	}
	if w.Attempts <= 0 {
		w.Attempts = max(row.Attempts, 1)
	}
	if w.Worker == "" {
		w.Worker = row.Worker
	}
	if w.StartedAt == nil {
		w.StartedAt = row.StartedAt
	}
	if o.FinishedAt != nil {
		w.FinishedAt = *o.FinishedAt
	}
	return w
}

// readyAfter lists the jobs of bumped, as deltas moved them, that the
// move made ready to close (becameReady), in the order of bumped.
func readyAfter(bumped []warren.Job, deltas []CounterDelta) []string {
	byID := make(map[string]CounterDelta, len(deltas))
	for _, d := range deltas {
		byID[d.JobID] = d
	}
	var ready []string
	for _, job := range bumped {
		if becameReady(job, byID[job.ID]) {
			ready = append(ready, job.ID)
		}
	}
	return ready
}

// JobsToClose returns up to limit ids of open jobs that are ready to close
// (store.ReadyToClose), oldest first; limit <= 0 means
// store.DefaultPageSize (PageSize). The driver narrows to candidates in SQL
// (CloseCandidates) and store.ReadyToClose decides, so the tolerance
// arithmetic is never written in SQL. Candidates are read in pages of
// limit until limit of them are ready or none is left: a fail-fast job
// within its tolerance is a candidate that is not ready, and must not
// take the place of one that is.
func (e *Engine) JobsToClose(ctx context.Context, limit int) ([]string, error) {
	limit = PageSize(limit)
	var ids []string
	after := ""
	for len(ids) < limit {
		candidates, next, err := e.drv.CloseCandidates(ctx, after, limit)
		if err != nil {
			return nil, e.errorf(err, "jobs to close")
		}
		for _, j := range candidates {
			if len(ids) < limit && store.ReadyToClose(j) {
				ids = append(ids, j.ID)
			}
		}
		if len(candidates) < limit {
			break
		}
		after = next
	}
	return ids, nil
}

// becameReady reports whether job j, just moved by d (its counters, and
// its reduce state when d sets one: the reduce task's outcome, recorded
// only while it was warren.ReduceRunning), is open and ready to close
// (store.ReadyToClose) and was not ready before the move. ApplyOutcomes
// and ReconcileStale list exactly these jobs in ReadyToClose, so a job is
// reported ready once, by the batch that made it so, however many batches
// touch it afterwards.
func becameReady(j warren.Job, d CounterDelta) bool {
	if j.State.Terminal() || !store.ReadyToClose(j) {
		return false
	}
	before := j
	before.CompletedTasks -= d.Completed
	before.FailedTasks -= d.Failed
	before.ExpectedTasks -= d.Expected
	if d.ReduceState != "" {
		before.ReduceState = warren.ReduceRunning
	}
	return !store.ReadyToClose(before)
}

// validateOutcomes returns an error naming the first outcome whose State
// is neither warren.TaskCompleted nor warren.TaskFailed, or that is a
// retried run's (store.Outcome.Retry) and not failed: ApplyOutcomes fails
// such a batch whole, before it writes anything.
func validateOutcomes(outcomes []store.Outcome) error {
	for i, o := range outcomes {
		if o.State != warren.TaskCompleted && o.State != warren.TaskFailed {
			return fmt.Errorf("outcome %d (job %q task %d): state must be completed or failed, got %q", i, o.JobID, o.TaskID, o.State)
		}
		if o.Retry && o.State != warren.TaskFailed {
			return fmt.Errorf("outcome %d (job %q task %d): a retried run's state must be failed, got %q", i, o.JobID, o.TaskID, o.State)
		}
	}
	return nil
}

// sanitizeOutcomes returns outcomes with their Error, Worker and Traceback as
// storedText makes them, for ApplyOutcomes to store: outcomes itself when
// none needs it, else a copy (the caller's slice is left as it is).
// Results are not text: they are stored byte for byte.
func sanitizeOutcomes(outcomes []store.Outcome) []store.Outcome {
	var clean []store.Outcome
	for i, o := range outcomes {
		e, w, tb := storedText(o.Error), storedText(o.Worker), storedText(o.Traceback)
		if e == o.Error && w == o.Worker && tb == o.Traceback {
			continue
		}
		if clean == nil {
			clean = slices.Clone(outcomes)
		}
		clean[i].Error, clean[i].Worker, clean[i].Traceback = e, w, tb
	}
	if clean == nil {
		return outcomes
	}
	return clean
}
