package engine

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/store"
)

// RelayTx holds the primitives that claim and mark a relay round (RelayRound, RelayBatch).
type RelayTx interface {
	// PendingJobs reads every open job (pending or running), in creation
	// order, with whether it or its queue is paused (Paused), its ID, Priority, BatchSize and Queue as stored ("" for
	// the default queue), its pending tasks (its reduce task among them)
	// counted up to limit (an index range of at most limit of its task
	// rows) in Pending, and its reduce task and reduce state. Of a job
	// with a concurrency cap (warren.Policy.MaxConcurrency above 0), it
	// also reads the cap and its queued tasks counted up to the cap (an
	// index range of about that many rows: a capped job has no more
	// queued tasks but after a dead-letter replay); an uncapped job costs
	// nothing more. A driver whose relays run concurrently (PostgreSQL)
	// gives each capped job's claim to one round at a time without
	// waiting: a round that cannot take it reads the job as Busy, and
	// the round that holds it keeps it until its transaction ends, so
	// its count of queued tasks includes every task an earlier round
	// marked queued.
	PendingJobs(ctx context.Context, limit int) ([]PendingJobRow, error)
	// ClaimTasks claims pending tasks of open jobs: of each claim's job,
	// its first N pending tasks in task id order, the claims in the order
	// given, while the payload bytes claimed before a task are under
	// bytes (bytes <= 0: no bound), so at least one task. A driver whose
	// relays run concurrently (PostgreSQL) locks the tasks it claims until
	// the transaction ends and skips those another round holds. It
	// returns them in that order, with BatchSize 0, More false, and Queue
	// and TaskTimeout as the job stores them ("" and 0 when it has none).
	ClaimTasks(ctx context.Context, claims []RelayClaim, bytes int64) ([]store.OutboxTask, error)
	// MarkQueued writes the transition of each task of marks (in job id,
	// then task id order) that is still at the mark's generation: a
	// pending task becomes queued, queued at at; a task no longer pending
	// (an early outcome finished it) keeps its state and gets queued_at at
	// if it has none. It returns how many tasks it wrote and, of the
	// marks' jobs, those still pending with no pending task left that no
	// other round holds claimed (such a task is that round's to check
	// after).
	MarkQueued(ctx context.Context, marks []RelayMark, at time.Time) (marked int, idle []string, err error)
	// StartJobs moves the jobs ids (in id order) from pending to running,
	// started at at, version bumped, each only if it is still pending
	// with no pending task. A driver whose relays run concurrently locks
	// the job rows in id order and checks for pending tasks after the
	// locks, with a fresh snapshot: of two rounds that publish the last
	// tasks of one job at once, the second to lock the row sees the
	// first one's commit.
	StartJobs(ctx context.Context, ids []string, at time.Time) error
}

// PendingJobRow is an open job as PendingJobs reads it.
type PendingJobRow struct {
	store.PendingJob
	// ReduceTask is the job's warren.Policy.ReduceTask while it reduces
	// (ReduceState warren.ReduceRunning), nil otherwise: a driver reads
	// it only then, not for every open job in every round.
	ReduceTask *warren.ReduceTask
	// ReduceState is the job's warren.Job.ReduceState.
	ReduceState string
	// ExpectedTasks is the job's number of map tasks, which its reduce
	// task's message carries.
	ExpectedTasks int64
	// MaxConcurrency is the job's warren.Policy.MaxConcurrency (0: no
	// cap).
	MaxConcurrency int
	// InFlight is, of a capped job, how many of its tasks are queued,
	// counted up to MaxConcurrency; 0 for an uncapped job.
	InFlight int
	// Busy reports that another round holds the capped job's claim: this
	// round gives it no share.
	Busy bool
	// Paused reports that the job, or its work queue, is paused
	// (Engine.PauseJob, Engine.PauseQueue): the round gives it no share.
	Paused bool
}

// RelayClaim is one job's share of a relay round: the most of its
// pending tasks to claim.
type RelayClaim struct {
	JobID string
	N     int
}

// RelayMark is a claimed task whose publishing the broker confirmed, at
// the generation it was claimed with.
type RelayMark struct {
	JobID      string
	TaskID     int64
	Generation int
}

// RelayRoundTx is the transaction of a relay round (Driver.BeginRelay):
// what it claims, no other round of the store is offered until it ends.
// A Tx is one.
type RelayRoundTx interface {
	RelayTx
	// Commit makes the round's writes durable and ends its claim.
	Commit(ctx context.Context) error
	// Rollback discards the round's writes and ends its claim. After
	// Commit it wraps ErrTxDone.
	Rollback(ctx context.Context) error
}

// RelayBatch is RelayRound with a round of limit tasks and messages;
// limit <= 0 means store.DefaultPageSize.
func (e *Engine) RelayBatch(ctx context.Context, limit int, publish func(ctx context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error)) (int, error) {
	limit = PageSize(limit)
	return e.RelayRound(ctx, store.Round{Messages: limit, Tasks: limit}, publish)
}

// RelayRound claims the pending tasks of open jobs that round allows,
// shared between the jobs by served and claimed in the order it
// served them, calls publish with them, and marks queued, at the time
// publish was called, exactly the claimed tasks publish returns; a job
// left with no pending task moves from pending to running. queued_at is
// when the publish started because a fast worker's result can be
// recorded before the mark.
//
// An error from publish marks nothing, even tasks it returned as
// confirmed: they are offered again, and the aggregator ignores the
// duplicate results a second publish can cause. The error is returned as
// it is. A ref publish returns that was not claimed is not this round's
// to mark (another round may hold it) and is ignored.
func (e *Engine) RelayRound(ctx context.Context, round store.Round, publish func(ctx context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error)) (int, error) {
	// queued_at is read from the clock: a process that only relays must
	// keep it synced too.
	if err := e.clock.Sync(ctx); err != nil {
		return 0, e.errorf(err, "relay: read the clock")
	}
	tx, err := e.drv.BeginRelay(ctx)
	if err != nil {
		return 0, e.errorf(err, "relay")
	}
	defer func() { _ = ignoreDone(tx.Rollback(context.WithoutCancel(ctx))) }()
	tasks, err := e.claim(ctx, tx, round)
	if err != nil {
		return 0, e.errorf(err, "relay")
	}
	if len(tasks) == 0 {
		return 0, nil
	}
	at := e.now()
	refs, err := publish(ctx, tasks)
	if err != nil {
		return 0, err
	}
	marks := confirmed(tasks, refs)
	if len(marks) == 0 {
		return 0, nil
	}
	n, idle, err := tx.MarkQueued(ctx, marks, at)
	if err != nil {
		return 0, e.errorf(err, "relay: mark tasks queued")
	}
	// A job whose tasks are all out has started.
	if len(idle) > 0 {
		if err := tx.StartJobs(ctx, idle, at); err != nil {
			return 0, e.errorf(err, "relay: start jobs")
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, e.errorf(err, "relay: commit")
	}
	return n, nil
}

// claim claims the round's tasks: the open jobs with pending tasks
// counted, their shares chosen by served, the shares claimed in
// the order it served them, and each task given what its job's share
// says (batch size, whether the round cut it) and the defaults of what
// its job leaves unset (queue, task timeout).
//
// A job whose reduce task runs (warren.ReduceRunning) has no pending map
// task (StartReduce starts it once every map task finished; nothing
// reopens one while it runs): its pending task is its reduce task, which
// the round serves from the reduce queue (warren.Policy.ReduceQueue),
// alone in its message (batch size 1), of the reduce task's type.
func (e *Engine) claim(ctx context.Context, tx RelayTx, round store.Round) ([]store.OutboxTask, error) {
	limit := pendingCap(round.Tasks, int(e.openJobs.Load()))
	open, err := tx.PendingJobs(ctx, limit)
	if err != nil {
		return nil, err
	}
	e.openJobs.Store(int64(len(open)))
	var jobs []store.PendingJob
	reducing := make(map[string]PendingJobRow)
	for _, row := range open {
		j := row.PendingJob
		if j.Pending == 0 || row.Paused {
			continue
		}
		j.Queue = protocol.QueueOrDefault(j.Queue)
		j.More = j.Pending >= limit
		if room, capped := capRoom(row); capped && j.Pending > room {
			// Cut before served shares the round: what the job cannot
			// use goes to the other jobs of its queue, and its batches
			// never take it past its cap (a message's tasks count).
			j.Pending, j.More = room, true
			if round.Held != nil {
				round.Held(j.ID)
			}
			if room == 0 {
				continue
			}
		}
		if row.ReduceState == warren.ReduceRunning && row.ReduceTask != nil {
			reducing[j.ID] = row
			j.Queue = warren.Policy{Queue: j.Queue, ReduceTask: row.ReduceTask}.ReduceQueue()
			j.BatchSize = 1
		}
		jobs = append(jobs, j)
	}
	if len(jobs) == 0 {
		return nil, nil
	}
	// What each job has pending before served cuts it to what Round.Batch
	// lets it take: a job offered less than that has more.
	counted := make(map[string]store.PendingJob, len(jobs))
	for _, j := range jobs {
		counted[j.ID] = j
	}
	shares, order := served(round, jobs, int(e.turn.Add(1)-1))
	claims := make([]RelayClaim, len(order))
	for k, i := range order {
		claims[k] = RelayClaim{JobID: jobs[i].ID, N: shares[i]}
	}
	tasks, err := tx.ClaimTasks(ctx, claims, round.Bytes)
	if err != nil {
		return nil, err
	}
	offered := make(map[string]int, len(claims))
	for _, t := range tasks {
		offered[t.JobID]++
	}
	batch := make(map[string]int, len(jobs))
	for _, j := range jobs {
		batch[j.ID] = j.BatchSize
	}
	for i := range tasks {
		t := &tasks[i]
		j := counted[t.JobID]
		t.BatchSize = batch[t.JobID]
		t.More = j.More || offered[t.JobID] < j.Pending
		t.Queue = protocol.QueueOrDefault(t.Queue)
		t.TaskTimeout = warren.Policy{TaskTimeout: t.TaskTimeout}.EffectiveTaskTimeout()
		if r, ok := reducing[t.JobID]; ok && t.TaskID == warren.ReduceTaskID {
			t.Type = r.ReduceTask.Type
			t.Queue = warren.Policy{Queue: t.Queue, ReduceTask: r.ReduceTask}.ReduceQueue()
			t.BatchSize = 1
			t.ExpectedTasks = r.ExpectedTasks
		}
	}
	return tasks, nil
}

// capRoom is how many more of its tasks job row may have queued now
// (its cap less those in flight, never below 0; none while another round
// holds its claim), and whether it has a cap at all.
func capRoom(row PendingJobRow) (room int, capped bool) {
	if row.MaxConcurrency <= 0 {
		return 0, false
	}
	if row.Busy {
		return 0, true
	}
	return max(0, row.MaxConcurrency-row.InFlight), true
}

// confirmed returns the marks of the claimed tasks that refs names, once
// each, in job id then task id order (the lock order). Any other ref is
// not this round's to mark: its task may be another round's, or not
// pending at all.
func confirmed(claimed []store.OutboxTask, refs []store.TaskRef) []RelayMark {
	generation := make(map[store.TaskRef]int, len(claimed))
	for _, t := range claimed {
		generation[t.Ref()] = t.Generation
	}
	marks := make([]RelayMark, 0, len(refs))
	for _, ref := range refs {
		if g, ok := generation[ref]; ok {
			marks = append(marks, RelayMark{JobID: ref.JobID, TaskID: ref.TaskID, Generation: g})
			delete(generation, ref)
		}
	}
	slices.SortFunc(marks, func(a, b RelayMark) int {
		return cmp.Or(strings.Compare(a.JobID, b.JobID), cmp.Compare(a.TaskID, b.TaskID))
	})
	return marks
}
