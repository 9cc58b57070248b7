package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/store"
)

// RelayBatch is RelayRound with a round of limit tasks and messages;
// limit <= 0 means store.DefaultPageSize.
func (s *Store) RelayBatch(ctx context.Context, limit int, publish func(ctx context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error)) (int, error) {
	limit = store.PageSize(limit)
	return s.RelayRound(ctx, store.Round{Messages: limit, Tasks: limit}, publish)
}

// RelayRound claims the pending tasks of open jobs that round allows,
// shared between the jobs by store.Shares, and calls publish with them
// while holding their row locks. Claiming skips rows another relay holds
// (FOR UPDATE SKIP LOCKED), so concurrent relays, in one process or many,
// are never offered the same task. Exactly the claimed tasks that publish
// returns are marked queued, and a job left with no pending task moves
// from pending to running, in the same transaction.
//
// An error from publish marks nothing, even tasks it returned as
// confirmed: they are offered again, and the aggregator ignores the
// duplicate results a second publish can cause. The error is returned as it
// is.
func (s *Store) RelayRound(ctx context.Context, round store.Round, publish func(ctx context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error)) (int, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("postgres: relay: %w", err)
	}
	defer rollback(ctx, tx)

	tasks, err := s.claimPending(ctx, tx, round)
	if err != nil || len(tasks) == 0 {
		return 0, err
	}
	// queued_at is when the publish started: a fast worker's result can
	// be recorded before the mark.
	at := s.clock()
	refs, err := publish(ctx, tasks)
	if err != nil {
		return 0, err
	}
	confirmed := confirmedRefs(tasks, refs)
	if len(confirmed) == 0 {
		return 0, nil
	}
	n, err := markQueued(ctx, tx, confirmed, at)
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("postgres: relay: commit: %w", err)
	}
	return n, nil
}

// claimPending locks and returns the pending tasks of open jobs that
// round allows, shared between the jobs by store.Shares, grouped by job.
func (s *Store) claimPending(ctx context.Context, tx pgx.Tx, round store.Round) ([]store.OutboxTask, error) {
	limit := store.PendingCap(round.Tasks, int(s.openJobs.Load()))
	jobs, open, err := pendingJobs(ctx, tx, limit)
	if err != nil {
		return nil, err
	}
	s.openJobs.Store(int64(open))
	if len(jobs) == 0 {
		return nil, nil
	}
	shares := store.Shares(round, jobs, int(s.turn.Add(1)-1))
	ids := make([]string, 0, len(jobs))
	limits := make([]int32, 0, len(jobs))
	for i, j := range jobs {
		if shares[i] > 0 {
			ids = append(ids, j.ID)
			limits = append(limits, int32(shares[i]))
		}
	}
	// Each job's row is read once, not once per task: the aggregator
	// updates a busy job's row all the time, and every probe of it walks
	// the versions that left.
	// Round.Bytes: the payloads are measured where they are, and those
	// past the budget never leave the server (their rows stay locked, and
	// pending, until the commit).
	rows, err := tx.Query(ctx, `
		WITH j AS MATERIALIZED (
			SELECT q.ord, q.n, j.id, j.type, j.max_retries, j.batch_size, j.task_timeout_ms, j.queue, j.trace_parent, j.trace_state
			FROM unnest($1::text[], $2::int[]) WITH ORDINALITY AS q(job_id, n, ord)
			JOIN jobs j ON j.id = q.job_id AND j.state IN ('pending', 'running')),
		c AS (
			SELECT j.ord, j.id, c.task_id, j.type, c.payload, j.max_retries, c.attempts, j.batch_size, c.generation, j.task_timeout_ms, j.queue, j.trace_parent, j.trace_state,
				sum(octet_length(c.payload)) OVER (ORDER BY j.ord, c.task_id) - octet_length(c.payload) AS before
			FROM j CROSS JOIN LATERAL (
				SELECT t.task_id, t.payload, t.attempts, t.generation FROM tasks t
				WHERE t.job_id = j.id AND t.state = 'pending'
				ORDER BY t.task_id
				LIMIT j.n
				FOR UPDATE SKIP LOCKED) c)
		SELECT id, task_id, type, payload, max_retries, attempts, batch_size, generation, task_timeout_ms, queue, trace_parent, trace_state
		FROM c
		WHERE $3::bigint <= 0 OR before < $3::bigint
		ORDER BY ord, task_id`, ids, limits, round.Bytes)
	if err != nil {
		return nil, fmt.Errorf("postgres: relay: claim tasks: %w", err)
	}
	tasks, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.OutboxTask, error) {
		var (
			t         store.OutboxTask
			payload   []byte
			timeoutMS int64
		)
		err := row.Scan(&t.JobID, &t.TaskID, &t.Type, &payload, &t.MaxRetries, &t.Attempts, &t.BatchSize, &t.Generation, &timeoutMS, &t.Queue,
			&t.TraceParent, &t.TraceState)
		t.Payload = payload
		t.Queue = protocol.QueueOrDefault(t.Queue)
		t.TaskTimeout = warren.Policy{TaskTimeout: time.Duration(timeoutMS) * time.Millisecond}.EffectiveTaskTimeout()
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: relay: claim tasks: %w", err)
	}
	setBatchSizes(tasks, jobs)
	return tasks, nil
}

// setBatchSizes gives each task the batch size store.Shares chose for
// its job this round (jobs holds the round's jobs, as Shares left them).
func setBatchSizes(tasks []store.OutboxTask, jobs []store.PendingJob) {
	sizes := make(map[string]int, len(jobs))
	for _, j := range jobs {
		sizes[j.ID] = j.BatchSize
	}
	for i := range tasks {
		tasks[i].BatchSize = sizes[tasks[i].JobID]
	}
}

// pendingJobs returns the open jobs with pending tasks, oldest first, each
// with its pending tasks counted up to limit (an index range of at most
// limit rows per job).
func pendingJobs(ctx context.Context, tx pgx.Tx, limit int) (jobs []store.PendingJob, open int, err error) {
	rows, err := tx.Query(ctx, `
		SELECT j.id, j.priority, j.batch_size, j.queue,
			(SELECT count(*) FROM (SELECT 1 FROM tasks t WHERE t.job_id = j.id AND t.state = 'pending' LIMIT $1) p)
		FROM jobs j
		WHERE j.state IN ('pending', 'running')
		ORDER BY j.created_at, j.id`, limit)
	if err != nil {
		return nil, 0, fmt.Errorf("postgres: relay: pending jobs: %w", err)
	}
	all, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.PendingJob, error) {
		var j store.PendingJob
		err := row.Scan(&j.ID, &j.Priority, &j.BatchSize, &j.Queue, &j.Pending)
		j.Queue = protocol.QueueOrDefault(j.Queue)
		j.More = j.Pending >= limit
		return j, err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("postgres: relay: pending jobs: %w", err)
	}
	open = len(all)
	jobs = all[:0]
	for _, j := range all {
		if j.Pending > 0 {
			jobs = append(jobs, j)
		}
	}
	return jobs, open, nil
}

// confirmedRefs keeps the refs publish returned that name a claimed task,
// once each, sorted. Any other ref is not this relay's to mark: its row may
// be locked by another relay, or not be pending at all.
func confirmedRefs(claimed []store.OutboxTask, refs []store.TaskRef) []store.TaskRef {
	ours := make(map[store.TaskRef]bool, len(claimed))
	for _, t := range claimed {
		ours[t.Ref()] = true
	}
	out := make([]store.TaskRef, 0, len(refs))
	for _, r := range refs {
		if ours[r] {
			out = append(out, r)
			delete(ours, r)
		}
	}
	slices.SortFunc(out, compareRefs)
	return out
}

// markQueued marks the confirmed tasks queued and moves their jobs with no
// pending task left from pending to running, in one round trip.
//
// A job that still has a pending task no relay holds is left alone: the
// relay that claims that task checks the job after it. Only the other jobs
// are locked, so a big job's row is not locked by every relay round (the
// aggregator updates its counters all the time). Their rows are locked (in
// id order) before the pending check, and the check runs as a later
// statement with a fresh snapshot: of two relays that publish the last
// tasks of one job concurrently, the second to get the lock sees the first
// one's commit, so the job cannot stay pending.
func markQueued(ctx context.Context, tx pgx.Tx, refs []store.TaskRef, now time.Time) (int, error) {
	jobIDs, taskIDs := splitRefs(refs)
	var jobs []string
	for _, r := range refs {
		if len(jobs) == 0 || jobs[len(jobs)-1] != r.JobID {
			jobs = append(jobs, r.JobID)
		}
	}
	// A pending task gets queued_at now even if it has one: this publish
	// (after a redrive or a reconciler's requeue) starts its task timeout
	// afresh. A task an early result finished keeps its state and gets a
	// queued_at only if it had none.
	b := &pgx.Batch{}
	b.Queue(`
		UPDATE tasks
		SET queued_at = CASE WHEN tasks.state = 'pending' THEN $3 ELSE COALESCE(tasks.queued_at, $3) END,
		    state = CASE WHEN tasks.state = 'pending' THEN 'queued' ELSE tasks.state END
		FROM unnest($1::text[], $2::bigint[]) AS r(job_id, task_id)
		WHERE tasks.job_id = r.job_id AND tasks.task_id = r.task_id
		  AND (tasks.state = 'pending' OR tasks.queued_at IS NULL)`,
		jobIDs, taskIDs, now)
	// The jobs still pending with no pending task that no relay holds (a
	// running job needs no check). A pending task another relay holds is
	// that relay's to check after.
	b.Queue(`
		SELECT j.id FROM jobs j
		WHERE j.id = ANY($1) AND j.state = 'pending'
		  AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.job_id = j.id AND t.state = 'pending' LIMIT 1 FOR UPDATE SKIP LOCKED)
		ORDER BY j.id`, jobs)
	br := tx.SendBatch(ctx, b)
	tag, err := br.Exec()
	var check []string // jobs with no unclaimed pending task
	if err == nil {
		rows, _ := br.Query() // its error is the rows' too
		check, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil && len(check) > 0 {
		b = &pgx.Batch{}
		b.Queue(`SELECT id FROM jobs WHERE id = ANY($1) AND state = 'pending' ORDER BY id FOR UPDATE`, check)
		b.Queue(`
			UPDATE jobs SET state = 'running', started_at = $2, version = version + 1
			WHERE id = ANY($1) AND state = 'pending'
			  AND NOT EXISTS (SELECT 1 FROM tasks WHERE tasks.job_id = jobs.id AND tasks.state = 'pending')`,
			check, now)
		br = tx.SendBatch(ctx, b)
		_, err = br.Exec()
		if err == nil {
			_, err = br.Exec()
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return 0, fmt.Errorf("postgres: relay: mark tasks queued: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// compareRefs orders task refs by job id, then task id.
func compareRefs(a, b store.TaskRef) int {
	return cmp.Or(strings.Compare(a.JobID, b.JobID), cmp.Compare(a.TaskID, b.TaskID))
}
