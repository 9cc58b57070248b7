package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

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

// RelayRound offers the pending tasks of open jobs that round allows,
// shared between the jobs by store.Shares, to publish and marks queued
// those publish returns.
//
// SQLite has one writer, so no write transaction is held while publish
// talks to the broker: the candidates are read, published, then marked in a
// short transaction that only touches rows still pending (a task cancelled
// or finished meanwhile is left alone). Calls are serialised in-process, so
// two relays of one store are never offered the same task. A ref publish
// returns that was not offered is ignored. An error from publish marks
// nothing and is returned as it is.
func (s *Store) RelayRound(ctx context.Context, round store.Round, publish func(ctx context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error)) (int, error) {
	select {
	case s.relay <- struct{}{}:
		defer func() { <-s.relay }()
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	tasks, err := s.outbox(ctx, round)
	if err != nil {
		return 0, fmt.Errorf("sqlite: relay: %w", err)
	}
	if len(tasks) == 0 {
		return 0, nil
	}
	// queued_at is when the publish started: a fast worker's result can
	// be recorded before the mark.
	at := now().UnixMicro()
	refs, err := publish(ctx, tasks)
	if err != nil {
		return 0, err
	}
	n, err := s.markQueued(ctx, tasks, refs, at)
	if err != nil {
		return 0, fmt.Errorf("sqlite: relay: %w", err)
	}
	return n, nil
}

// pendingJobsSQL lists the open jobs, oldest first, with their pending
// tasks counted up to ?1. jobs_open walks the open jobs in seq order and
// tasks_by_state counts a job's pending range, reading at most ?1 rows of
// it.
const pendingJobsSQL = `SELECT j.id, j.priority, j.batch_size, j.queue,
	(SELECT count(*) FROM (SELECT 1 FROM tasks AS t WHERE t.job_id = j.id AND t.state = 'pending' LIMIT ?1))
	FROM jobs AS j INDEXED BY jobs_open
	WHERE j.state IN ('pending', 'running')
	ORDER BY j.seq`

// outboxSQL selects up to ?2 pending tasks of job ?1, in task id order.
const outboxSQL = `SELECT t.job_id, t.task_id, j.type, t.payload, j.max_retries, t.attempts, j.batch_size, t.generation, j.task_timeout_ms, j.queue,
	j.trace_parent, j.trace_state
	FROM tasks AS t JOIN jobs AS j ON j.id = t.job_id
	WHERE t.job_id = ?1 AND t.state = 'pending' AND j.state IN ('pending', 'running')
	ORDER BY t.task_id
	LIMIT ?2`

// outbox reads the pending tasks of open jobs that round allows, shared
// between the jobs by store.Shares, grouped by job.
func (s *Store) outbox(ctx context.Context, round store.Round) ([]store.OutboxTask, error) {
	jobs, err := s.pendingJobs(ctx, round.Tasks)
	if err != nil || len(jobs) == 0 {
		return nil, err
	}
	shares := store.Shares(round, jobs, int(s.turn.Add(1)-1))
	var (
		tasks []store.OutboxTask
		bytes int64
	)
	for i, j := range jobs {
		if shares[i] == 0 || (round.Bytes > 0 && bytes >= round.Bytes) {
			continue
		}
		if tasks, err = s.jobOutbox(ctx, tasks, j, shares[i], round.Bytes, &bytes); err != nil {
			return nil, err
		}
	}
	return tasks, nil
}

// pendingJobs returns the open jobs with pending tasks, oldest first, each
// with its pending tasks counted up to store.PendingCap of tasks.
func (s *Store) pendingJobs(ctx context.Context, tasks int) ([]store.PendingJob, error) {
	limit := store.PendingCap(tasks, int(s.openJobs.Load()))
	rows, err := s.r.QueryContext(ctx, pendingJobsSQL, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var (
		jobs []store.PendingJob
		open int64
	)
	for rows.Next() {
		var j store.PendingJob
		if err := rows.Scan(&j.ID, &j.Priority, &j.BatchSize, &j.Queue, &j.Pending); err != nil {
			return nil, err
		}
		j.Queue = protocol.QueueOrDefault(j.Queue)
		j.More = j.Pending >= limit
		open++
		if j.Pending > 0 {
			jobs = append(jobs, j)
		}
	}
	s.openJobs.Store(open)
	return jobs, rows.Err()
}

// jobOutbox appends up to limit pending tasks of job j, in task id
// order, to tasks, with the batch size store.Shares chose for it, while
// *bytes, the payload bytes taken so far, is under budget (budget 0:
// no bound).
func (s *Store) jobOutbox(ctx context.Context, tasks []store.OutboxTask, j store.PendingJob, limit int, budget int64, bytes *int64) ([]store.OutboxTask, error) {
	rows, err := s.r.QueryContext(ctx, outboxSQL, j.ID, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() && (budget <= 0 || *bytes < budget) {
		var (
			t         store.OutboxTask
			timeoutMS int64
		)
		if err := rows.Scan(&t.JobID, &t.TaskID, &t.Type, &t.Payload, &t.MaxRetries, &t.Attempts, &t.BatchSize, &t.Generation, &timeoutMS, &t.Queue,
			&t.TraceParent, &t.TraceState); err != nil {
			return nil, err
		}
		t.Queue = protocol.QueueOrDefault(t.Queue)
		t.TaskTimeout = warren.Policy{TaskTimeout: time.Duration(timeoutMS) * time.Millisecond}.EffectiveTaskTimeout()
		t.BatchSize = j.BatchSize
		*bytes += int64(len(t.Payload))
		tasks = append(tasks, t)
	}
	return tasks, rows.Err()
}

// markQueued marks queued the offered tasks named in refs that are still
// pending at the generation they were offered with, and moves each offered
// job with no pending task left from pending to running. It returns the
// number of tasks marked.
//
// No write transaction is held while the tasks are published, so a task
// may have been cancelled and redriven meanwhile: pending again, at a new
// generation that the published message does not carry. It stays pending,
// for the relay to publish at its new generation.
func (s *Store) markQueued(ctx context.Context, offered []store.OutboxTask, refs []store.TaskRef, at int64) (int, error) {
	generation := make(map[store.TaskRef]int, len(offered))
	var jobs []string
	for i, t := range offered {
		generation[t.Ref()] = t.Generation
		if i == 0 || offered[i-1].JobID != t.JobID {
			jobs = append(jobs, t.JobID)
		}
	}
	// Runs of consecutive task ids of one job at one generation, each id
	// offered and confirmed, are marked by one statement each.
	type run struct {
		job        string
		from, to   int64
		generation int
	}
	var runs []run
	for _, ref := range refs {
		g, ok := generation[ref]
		if !ok {
			continue
		}
		if n := len(runs); n > 0 && runs[n-1].job == ref.JobID && runs[n-1].to+1 == ref.TaskID && runs[n-1].generation == g {
			runs[n-1].to = ref.TaskID
			continue
		}
		runs = append(runs, run{ref.JobID, ref.TaskID, ref.TaskID, g})
	}
	// A pending task gets queued_at now even if it has one: this publish
	// (after a redrive or a reconciler's requeue) starts its task timeout
	// afresh. A fast worker's result may have finished a task before its
	// mark: the task keeps its terminal state and still gets a queued_at
	// if it had none.
	var marked int
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		mark, err := tx.PrepareContext(ctx, `UPDATE tasks
			SET queued_at = CASE WHEN state = 'pending' THEN ?1 ELSE COALESCE(queued_at, ?1) END,
			    state = CASE WHEN state = 'pending' THEN 'queued' ELSE state END
			WHERE job_id = ?2 AND task_id BETWEEN ?3 AND ?4 AND generation = ?5
			  AND (state = 'pending' OR queued_at IS NULL)`)
		if err != nil {
			return err
		}
		defer mark.Close()
		for _, r := range runs {
			res, err := mark.ExecContext(ctx, at, r.job, r.from, r.to, r.generation)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			marked += int(n)
		}
		start, err := tx.PrepareContext(ctx, `UPDATE jobs SET state = 'running', started_at = COALESCE(started_at, ?), version = version + 1
			WHERE id = ? AND state = 'pending'
			AND NOT EXISTS (SELECT 1 FROM tasks WHERE job_id = ? AND state = 'pending')`)
		if err != nil {
			return err
		}
		defer start.Close()
		for _, id := range jobs {
			if _, err := start.ExecContext(ctx, at, id, id); err != nil {
				return err
			}
		}
		return nil
	})
	return marked, err
}
