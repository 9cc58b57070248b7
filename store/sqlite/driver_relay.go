package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/internal/engine"
	"github.com/warrenhq/warren/store/internal/sqlstore"
)

// pendingJobsSQL lists the open jobs, oldest first, with their pending
// tasks counted up to ?1. jobs_open walks the open jobs in seq order and
// tasks_by_state counts a job's pending range, reading at most ?1 rows of
// it; of a capped job, also its queued range, up to
// ?2 (warren.MaxConcurrencyLimit: SQLite takes no column of the outer
// query in a LIMIT). A capped job has no more queued tasks than its cap
// but after a dead-letter replay, so that range is at most about its cap
// long; pendingJobs cuts the count to the cap. The last column is
// whether the job or its work queue is paused (queue_pauses, by the
// queue's effective name).
const pendingJobsSQL = `SELECT j.id, j.priority, j.batch_size, j.queue, CASE WHEN j.reduce_state = 'running' THEN j.reduce_task END, j.reduce_state, j.expected_tasks,
	j.max_concurrency, (SELECT count(*) FROM (SELECT 1 FROM tasks AS t WHERE t.job_id = j.id AND t.state = 'pending' LIMIT ?1)),
	CASE WHEN j.max_concurrency > 0 THEN (SELECT count(*) FROM (SELECT 1 FROM tasks AS t WHERE t.job_id = j.id AND t.state = 'queued' LIMIT ?2)) ELSE 0 END,
	j.paused_at IS NOT NULL OR EXISTS (SELECT 1 FROM queue_pauses AS qp
		WHERE qp.queue = CASE WHEN j.queue = '' THEN 'default' ELSE j.queue END AND qp.paused_at IS NOT NULL)
	FROM jobs AS j INDEXED BY jobs_open
	WHERE j.state IN ('pending', 'running')
	ORDER BY j.seq`

// outboxSQL selects up to ?2 pending tasks of job ?1, in task id order.
const outboxSQL = `SELECT t.job_id, t.task_id, j.type, t.payload, j.max_retries, t.attempts, t.generation, j.task_timeout_ms, j.queue,
	j.trace_parent, j.trace_state
	FROM tasks AS t JOIN jobs AS j ON j.id = t.job_id
	WHERE t.job_id = ?1 AND t.state = 'pending' AND j.state IN ('pending', 'running')
	ORDER BY t.task_id
	LIMIT ?2`

// markQueuedSQL marks the tasks ?3..?4 of job ?2 that are still at
// generation ?5 (see engine.RelayTx.MarkQueued).
const markQueuedSQL = `UPDATE tasks
	SET queued_at = CASE WHEN state = 'pending' THEN ?1 ELSE COALESCE(queued_at, ?1) END,
	    state = CASE WHEN state = 'pending' THEN 'queued' ELSE state END
	WHERE job_id = ?2 AND task_id BETWEEN ?3 AND ?4 AND generation = ?5
	  AND (state = 'pending' OR queued_at IS NULL)`

// idleJobsSQL returns the jobs of the JSON array ?1 that are pending with
// no pending task. +state keeps the planner off jobs_by_state, which
// would walk every pending job: the jobs are sought by id.
const idleJobsSQL = `SELECT j.id FROM jobs AS j
	WHERE j.id IN (SELECT value FROM json_each(?1)) AND +j.state = 'pending'
	  AND NOT EXISTS (SELECT 1 FROM tasks AS t WHERE t.job_id = j.id AND t.state = 'pending')
	ORDER BY j.id`

// startJobsSQL starts the jobs of the JSON array ?1 that are pending with
// no pending task, at ?2 (sought by id, as idleJobsSQL).
const startJobsSQL = `UPDATE jobs SET state = 'running', published_at = COALESCE(published_at, ?2), version = version + 1
	WHERE id IN (SELECT value FROM json_each(?1)) AND +state = 'pending'
	  AND NOT EXISTS (SELECT 1 FROM tasks WHERE tasks.job_id = jobs.id AND tasks.state = 'pending')`

// BeginRelay implements engine.Driver. SQLite has one writer, so
// a round holds no write transaction while it publishes: it waits for
// the store's other round to end (a task is offered to one round at a
// time), reads its claim on the read pool, and begins the write
// transaction at its first write, after publish returned.
func (d engineDriver) BeginRelay(ctx context.Context) (engine.RelayRoundTx, error) {
	select {
	case d.s.relay <- struct{}{}:
		return &relayTx{s: d.s}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// relayTx is a relay round: reads on the read pool, writes in a write
// transaction begun by the first of them, the store's relay slot held
// until it ends.
type relayTx struct {
	s     *Store
	w     *tx // nil until the first write
	ended bool
}

// PendingJobs implements engine.RelayTx.
func (r *relayTx) PendingJobs(ctx context.Context, limit int) ([]engine.PendingJobRow, error) {
	return pendingJobs(ctx, r.s.r, limit)
}

// ClaimTasks implements engine.RelayTx.
func (r *relayTx) ClaimTasks(ctx context.Context, claims []engine.RelayClaim, bytes int64) ([]store.OutboxTask, error) {
	return claimTasks(ctx, r.s.r, claims, bytes)
}

// MarkQueued implements engine.RelayTx.
func (r *relayTx) MarkQueued(ctx context.Context, marks []engine.RelayMark, at time.Time) (int, []string, error) {
	w, err := r.write(ctx)
	if err != nil {
		return 0, nil, err
	}
	return w.MarkQueued(ctx, marks, at)
}

// StartJobs implements engine.RelayTx.
func (r *relayTx) StartJobs(ctx context.Context, ids []string, at time.Time) error {
	w, err := r.write(ctx)
	if err != nil {
		return err
	}
	return w.StartJobs(ctx, ids, at)
}

// write returns the round's write transaction, begun by its first call.
func (r *relayTx) write(ctx context.Context) (*tx, error) {
	if r.ended {
		return nil, engine.ErrTxDone
	}
	if r.w == nil {
		// A round's marks commit without a sync of their own
		// (withoutSync): a power cut that loses them loses only tasks
		// marked queued and jobs marked running, with every later
		// commit; those tasks are pending again and published again, and
		// the aggregator ignores the duplicate results. Every commit that
		// answers a client or allows an ack stays synced.
		t, err := r.s.w.BeginTx(withoutSync(ctx), nil)
		if err != nil {
			return nil, err
		}
		r.w = &tx{tx: t, s: r.s}
	}
	return r.w, nil
}

// Commit implements engine.RelayRoundTx.
func (r *relayTx) Commit(ctx context.Context) error {
	if r.ended {
		return engine.ErrTxDone
	}
	defer r.end()
	if r.w == nil {
		return nil
	}
	return r.w.Commit(ctx)
}

// Rollback implements engine.RelayRoundTx.
func (r *relayTx) Rollback(ctx context.Context) error {
	if r.ended {
		return engine.ErrTxDone
	}
	defer r.end()
	if r.w == nil {
		return nil
	}
	return r.w.Rollback(ctx)
}

// end gives the store's relay slot back.
func (r *relayTx) end() {
	r.ended = true
	<-r.s.relay
}

// PendingJobs implements engine.RelayTx.
func (t *tx) PendingJobs(ctx context.Context, limit int) ([]engine.PendingJobRow, error) {
	return pendingJobs(ctx, t.tx, limit)
}

// ClaimTasks implements engine.RelayTx.
func (t *tx) ClaimTasks(ctx context.Context, claims []engine.RelayClaim, bytes int64) ([]store.OutboxTask, error) {
	return claimTasks(ctx, t.tx, claims, bytes)
}

// MarkQueued implements engine.RelayTx: one statement per run of
// consecutive task ids of one job at one generation, then one for the
// jobs left idle.
func (t *tx) MarkQueued(ctx context.Context, marks []engine.RelayMark, at time.Time) (int, []string, error) {
	mark, err := t.stmt(ctx, markQueuedSQL)
	if err != nil {
		return 0, nil, err
	}
	defer mark.Close()
	var (
		marked int
		jobs   []string
	)
	for i := 0; i < len(marks); {
		j := i + 1
		for j < len(marks) && marks[j].JobID == marks[i].JobID && marks[j].Generation == marks[i].Generation &&
			marks[j].TaskID == marks[j-1].TaskID+1 {
			j++
		}
		res, err := mark.ExecContext(ctx, at.UnixMicro(), marks[i].JobID, marks[i].TaskID, marks[j-1].TaskID, marks[i].Generation)
		if err != nil {
			return 0, nil, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, nil, err
		}
		marked += int(n)
		if len(jobs) == 0 || jobs[len(jobs)-1] != marks[i].JobID {
			jobs = append(jobs, marks[i].JobID)
		}
		i = j
	}
	set, err := json.Marshal(jobs)
	if err != nil {
		return 0, nil, err
	}
	idleStmt, err := t.stmt(ctx, idleJobsSQL)
	if err != nil {
		return 0, nil, err
	}
	defer idleStmt.Close()
	rows, err := idleStmt.QueryContext(ctx, string(set))
	if err != nil {
		return 0, nil, err
	}
	defer rows.Close()
	var idle []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return 0, nil, err
		}
		idle = append(idle, id)
	}
	return marked, idle, rows.Err()
}

// StartJobs implements engine.RelayTx.
func (t *tx) StartJobs(ctx context.Context, ids []string, at time.Time) error {
	set, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	start, err := t.stmt(ctx, startJobsSQL)
	if err != nil {
		return err
	}
	defer start.Close()
	_, err = start.ExecContext(ctx, string(set), at.UnixMicro())
	return err
}

// pendingJobs reads the open jobs with their pending tasks counted up to
// limit (engine.RelayTx.PendingJobs).
func pendingJobs(ctx context.Context, q querier, limit int) ([]engine.PendingJobRow, error) {
	rows, err := q.QueryContext(ctx, pendingJobsSQL, limit, warren.MaxConcurrencyLimit)
	if err != nil {
		return nil, fmt.Errorf("pending jobs: %w", err)
	}
	defer rows.Close()
	var jobs []engine.PendingJobRow
	for rows.Next() {
		var (
			j      engine.PendingJobRow
			reduce []byte
		)
		if err := rows.Scan(&j.ID, &j.Priority, &j.BatchSize, &j.Queue, &reduce, &j.ReduceState, &j.ExpectedTasks, &j.MaxConcurrency, &j.Pending, &j.InFlight, &j.Paused); err != nil {
			return nil, fmt.Errorf("pending jobs: %w", err)
		}
		if j.ReduceTask, err = sqlstore.DecodeReduceTask(reduce); err != nil {
			return nil, fmt.Errorf("pending jobs: %w", err)
		}
		j.InFlight = min(j.InFlight, j.MaxConcurrency)
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pending jobs: %w", err)
	}
	// The store's rounds are serialised (BeginRelay): no other round can
	// move the queued counts up between the read and the claim (a
	// dead-letter replay may: docs/failures.md).
	return jobs, nil
}

// claimTasks reads the claims' tasks (engine.RelayTx.ClaimTasks), one
// statement per claim, stopping once the payloads read reach bytes.
func claimTasks(ctx context.Context, q querier, claims []engine.RelayClaim, bytes int64) ([]store.OutboxTask, error) {
	var (
		tasks []store.OutboxTask
		taken int64
	)
	for _, c := range claims {
		if bytes > 0 && taken >= bytes {
			break
		}
		var err error
		if tasks, err = claimJob(ctx, q, tasks, c, bytes, &taken); err != nil {
			return nil, fmt.Errorf("claim tasks of job %q: %w", c.JobID, err)
		}
	}
	return tasks, nil
}

// claimJob appends the first c.N pending tasks of job c.JobID to tasks,
// in task id order, while *taken, the payload bytes read so far, is under
// bytes (bytes <= 0: no bound).
func claimJob(ctx context.Context, q querier, tasks []store.OutboxTask, c engine.RelayClaim, bytes int64, taken *int64) ([]store.OutboxTask, error) {
	rows, err := q.QueryContext(ctx, outboxSQL, c.JobID, c.N)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() && (bytes <= 0 || *taken < bytes) {
		var (
			t         store.OutboxTask
			timeoutMS int64
		)
		if err := rows.Scan(&t.JobID, &t.TaskID, &t.Type, &t.Payload, &t.MaxRetries, &t.Attempts, &t.Generation, &timeoutMS, &t.Queue,
			&t.TraceParent, &t.TraceState); err != nil {
			return nil, err
		}
		t.TaskTimeout = time.Duration(timeoutMS) * time.Millisecond
		*taken += int64(len(t.Payload))
		tasks = append(tasks, t)
	}
	return tasks, rows.Err()
}
