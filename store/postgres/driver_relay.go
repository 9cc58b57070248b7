package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/internal/engine"
	"github.com/warrenhq/warren/store/internal/sqlstore"
)

// PendingJobs implements engine.RelayTx: an index range of at most limit
// rows per job counts its pending tasks.
//
// Rounds run side by side (several loops, several servers), so a capped
// job's claim is an advisory lock of the round's transaction, taken with
// pg_try_advisory_xact_lock: never waited for (a round that does not get
// it reads the job Busy), taken in no particular order among the row
// locks (it is no row lock and never waits, so it cannot deadlock them),
// and held until the round commits its marks. The queued tasks are
// counted by the next statement of the same round trip, whose snapshot
// is taken after the lock: it sees every mark of the round that held the
// lock before. Without capped jobs open, that statement reads an empty
// range of jobs_open_capped_idx. Each job's row also says whether it or
// its work queue is paused (queue_pauses, by the queue's effective
// name), after the round took the pause lock shared: a pause committed
// before reads as one.
func (t *tx) PendingJobs(ctx context.Context, limit int) ([]engine.PendingJobRow, error) {
	b := &pgx.Batch{}
	// The round holds the pause lock shared until it ends (BeginPause).
	b.Queue(`SELECT pg_advisory_xact_lock_shared(` + pauseLockKey + `)`)
	b.Queue(`
		SELECT j.id, j.priority, j.batch_size, j.queue, CASE WHEN j.reduce_state = 'running' THEN j.reduce_task END, j.reduce_state, j.expected_tasks,
			p.n, j.max_concurrency,
			CASE WHEN j.max_concurrency > 0 AND p.n > 0 THEN NOT pg_try_advisory_xact_lock(`+capClaimKey+`) ELSE false END,
			j.paused_at IS NOT NULL OR EXISTS (SELECT 1 FROM queue_pauses qp
				WHERE qp.queue = CASE WHEN j.queue = '' THEN 'default' ELSE j.queue END AND qp.paused_at IS NOT NULL)
		FROM jobs j
		CROSS JOIN LATERAL (SELECT count(*) AS n FROM (SELECT 1 FROM tasks t WHERE t.job_id = j.id AND t.state = 'pending' LIMIT $1) p) p
		WHERE j.state IN ('pending', 'running')
		ORDER BY j.created_at, j.id`, limit)
	b.Queue(`
		SELECT j.id, (SELECT count(*) FROM (SELECT 1 FROM tasks t WHERE t.job_id = j.id AND t.state = 'queued' LIMIT j.max_concurrency) q)
		FROM jobs j
		WHERE j.max_concurrency > 0 AND j.state IN ('pending', 'running')
		  AND EXISTS (SELECT 1 FROM tasks t WHERE t.job_id = j.id AND t.state = 'pending')`)
	br := t.tx.SendBatch(ctx, b)
	_, err := br.Exec()
	var jobs []engine.PendingJobRow
	if err == nil {
		jobs, err = pendingJobRows(br)
	}
	var inFlight map[string]int
	if err == nil {
		inFlight, err = queuedCounts(br)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("pending jobs: %w", err)
	}
	for i := range jobs {
		if j := &jobs[i]; j.MaxConcurrency > 0 && !j.Busy {
			// A job the second statement did not count had no pending
			// task left by then: it gets no share, rather than one from
			// a count of nothing.
			n, ok := inFlight[j.ID]
			j.InFlight, j.Busy = n, !ok
		}
	}
	return jobs, nil
}

// pendingJobRows reads the open jobs of PendingJobs's first statement.
func pendingJobRows(br pgx.BatchResults) ([]engine.PendingJobRow, error) {
	rows, _ := br.Query() // its error is the rows' too
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (engine.PendingJobRow, error) {
		var (
			j      engine.PendingJobRow
			reduce []byte
		)
		if err := row.Scan(&j.ID, &j.Priority, &j.BatchSize, &j.Queue, &reduce, &j.ReduceState, &j.ExpectedTasks, &j.Pending,
			&j.MaxConcurrency, &j.Busy, &j.Paused); err != nil {
			return j, err
		}
		var err error
		j.ReduceTask, err = sqlstore.DecodeReduceTask(reduce)
		return j, err
	})
}

// queuedCounts reads PendingJobs's second statement: the queued tasks of
// each open capped job with pending tasks, counted up to its cap.
func queuedCounts(br pgx.BatchResults) (map[string]int, error) {
	rows, _ := br.Query()
	counts := map[string]int{}
	var (
		id string
		n  int
	)
	_, err := pgx.ForEachRow(rows, []any{&id, &n}, func() error {
		counts[id] = n
		return nil
	})
	return counts, err
}

// capClaimKey is the advisory lock key of capped job j's claim: the
// job's id within its schema (tests, and tenants, share a database), as
// one 64-bit hash, a key space apart from Migrate's pair of int4 keys. Two
// jobs whose keys collide only take turns.
const capClaimKey = `hashtextextended('warren.max_concurrency:' || current_schema() || ':' || j.id, 0)`

// ClaimTasks implements engine.RelayTx in one statement: FOR UPDATE SKIP
// LOCKED claims the tasks, so concurrent relays, in one process or many,
// are never offered the same task, and the payloads are measured where
// they are, so that those past the budget never leave the server (their
// rows stay locked, and pending, until the transaction ends).
func (t *tx) ClaimTasks(ctx context.Context, claims []engine.RelayClaim, bytes int64) ([]store.OutboxTask, error) {
	ids := make([]string, len(claims))
	limits := make([]int32, len(claims))
	for i, c := range claims {
		ids[i], limits[i] = c.JobID, int32(c.N)
	}
	// Each job's row is read once, not once per task: the aggregator
	// updates a busy job's row all the time, and every probe of it walks
	// the versions that left. ord keeps the claims' order.
	rows, err := t.tx.Query(ctx, `
		WITH j AS MATERIALIZED (
			SELECT q.ord, q.n, j.id, j.type, j.max_retries, j.task_timeout_ms, j.queue, j.trace_parent, j.trace_state
			FROM unnest($1::text[], $2::int[]) WITH ORDINALITY AS q(job_id, n, ord)
			JOIN jobs j ON j.id = q.job_id AND j.state IN ('pending', 'running')),
		c AS (
			SELECT j.ord, j.id, c.task_id, j.type, c.payload, j.max_retries, c.attempts, c.generation, j.task_timeout_ms, j.queue, j.trace_parent, j.trace_state,
				sum(octet_length(c.payload)) OVER (ORDER BY j.ord, c.task_id) - octet_length(c.payload) AS before
			FROM j CROSS JOIN LATERAL (
				SELECT t.task_id, t.payload, t.attempts, t.generation FROM tasks t
				WHERE t.job_id = j.id AND t.state = 'pending'
				ORDER BY t.task_id
				LIMIT j.n
				FOR UPDATE SKIP LOCKED) c)
		SELECT id, task_id, type, payload, max_retries, attempts, generation, task_timeout_ms, queue, trace_parent, trace_state
		FROM c
		WHERE $3::bigint <= 0 OR before < $3::bigint
		ORDER BY ord, task_id`, ids, limits, bytes)
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	tasks, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.OutboxTask, error) {
		var (
			t         store.OutboxTask
			payload   []byte
			timeoutMS int64
		)
		err := row.Scan(&t.JobID, &t.TaskID, &t.Type, &payload, &t.MaxRetries, &t.Attempts, &t.Generation, &timeoutMS, &t.Queue,
			&t.TraceParent, &t.TraceState)
		t.Payload = payload
		t.TaskTimeout = time.Duration(timeoutMS) * time.Millisecond
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	return tasks, nil
}

// MarkQueued implements engine.RelayTx in one round trip: the marks, then
// the check of their jobs.
//
// A job that still has a pending task no relay holds is not idle. A
// pending task another relay holds is that relay's to check after: so
// only the jobs it returns are locked (by StartJobs), and a big job's
// row is not locked by every relay round (the aggregator updates its
// counters all the time).
func (t *tx) MarkQueued(ctx context.Context, marks []engine.RelayMark, at time.Time) (int, []string, error) {
	jobIDs := make([]string, len(marks))
	taskIDs := make([]int64, len(marks))
	generations := make([]int32, len(marks))
	var jobs []string
	for i, m := range marks {
		jobIDs[i], taskIDs[i], generations[i] = m.JobID, m.TaskID, int32(m.Generation)
		if len(jobs) == 0 || jobs[len(jobs)-1] != m.JobID {
			jobs = append(jobs, m.JobID)
		}
	}
	b := &pgx.Batch{}
	b.Queue(`
		UPDATE tasks
		SET queued_at = CASE WHEN tasks.state = 'pending' THEN $4 ELSE COALESCE(tasks.queued_at, $4) END,
		    state = CASE WHEN tasks.state = 'pending' THEN 'queued' ELSE tasks.state END
		FROM unnest($1::text[], $2::bigint[], $3::int[]) AS r(job_id, task_id, generation)
		WHERE tasks.job_id = r.job_id AND tasks.task_id = r.task_id AND tasks.generation = r.generation
		  AND (tasks.state = 'pending' OR tasks.queued_at IS NULL)`,
		jobIDs, taskIDs, generations, at)
	b.Queue(`
		SELECT j.id FROM jobs j
		WHERE j.id = ANY($1) AND j.state = 'pending'
		  AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.job_id = j.id AND t.state = 'pending' LIMIT 1 FOR UPDATE SKIP LOCKED)
		ORDER BY j.id`, jobs)
	br := t.tx.SendBatch(ctx, b)
	tag, err := br.Exec()
	var idle []string
	if err == nil {
		rows, _ := br.Query() // its error is the rows' too
		idle, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, nil, err
	}
	return int(tag.RowsAffected()), idle, nil
}

// StartJobs implements engine.RelayTx in one round trip: the job rows
// locked in id order, then the transition, a later statement with a
// fresh snapshot.
func (t *tx) StartJobs(ctx context.Context, ids []string, at time.Time) error {
	b := &pgx.Batch{}
	b.Queue(`SELECT id FROM jobs WHERE id = ANY($1) AND state = 'pending' ORDER BY id FOR UPDATE`, ids)
	b.Queue(`
		UPDATE jobs SET state = 'running', published_at = COALESCE(published_at, $2), version = version + 1
		WHERE id = ANY($1) AND state = 'pending'
		  AND NOT EXISTS (SELECT 1 FROM tasks WHERE tasks.job_id = jobs.id AND tasks.state = 'pending')`,
		ids, at)
	br := t.tx.SendBatch(ctx, b)
	_, err := br.Exec()
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}
