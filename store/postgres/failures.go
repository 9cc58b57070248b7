package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// claimStaleSQL claims up to $3 queued tasks of open jobs that are stale
// (store.Staleness): greatest(queued_at, $4) is more than their job's
// task timeout before $1, the cutoff (Staleness.Cutoff); $2 is the
// default timeout in milliseconds, $4 the busy time. Oldest publish
// first, skipping rows another transaction holds; it returns what
// store.SplitLost needs.
//
// The first queued_at bound, with the shortest timeout of any open job,
// lets tasks_queued_idx yield only the tasks queued before it, in order;
// it is NULL, so that nothing is read, while the busy time keeps every
// task from being stale (a backlog keeps the queues busy, and the tasks
// behind it need not be walked at every pass). The last condition
// applies each task's own job's timeout. A task another transaction
// finished or cancelled after this statement's snapshot is re-checked
// once locked and left out. The job rows are read, not locked: closing a
// job locks its unfinished tasks first, which this claim either holds
// (the close waits) or skips.
const claimStaleSQL = `
	SELECT t.job_id, t.task_id, t.attempts, j.max_retries
	FROM tasks t JOIN jobs j ON j.id = t.job_id
	WHERE t.state = 'queued'
	  AND t.queued_at < (SELECT CASE WHEN $4::timestamptz < bound THEN bound END
	      FROM (SELECT $1::timestamptz - interval '1 millisecond' *
	                min(CASE WHEN task_timeout_ms > 0 THEN task_timeout_ms ELSE $2::bigint END) AS bound
	            FROM jobs WHERE state IN ('pending', 'running')) AS b)
	  AND j.state IN ('pending', 'running')
	  AND greatest(t.queued_at, $4::timestamptz) < $1::timestamptz - interval '1 millisecond' *
	      CASE WHEN j.task_timeout_ms > 0 THEN j.task_timeout_ms ELSE $2::bigint END
	ORDER BY t.queued_at
	LIMIT $3
	FOR UPDATE OF t SKIP LOCKED`

// requeueLostSQL sends the tasks named by ($1, $2) that are still queued
// back to pending with attempts+1, at their next generation.
const requeueLostSQL = `
	UPDATE tasks SET state = 'pending', attempts = tasks.attempts + 1, generation = tasks.generation + 1
	FROM unnest($1::text[], $2::bigint[]) AS r(job_id, task_id)
	WHERE tasks.job_id = r.job_id AND tasks.task_id = r.task_id AND tasks.state = 'queued'`

// failLostSQL fails the tasks named by ($1, $2) that are still queued with
// the error $3, finished_at $4 and attempts+1, and returns their job ids.
const failLostSQL = `
	UPDATE tasks SET state = 'failed', attempts = tasks.attempts + 1, error = $3, finished_at = $4
	FROM unnest($1::text[], $2::bigint[]) AS r(job_id, task_id)
	WHERE tasks.job_id = r.job_id AND tasks.task_id = r.task_id AND tasks.state = 'queued'
	RETURNING tasks.job_id`

// ReconcileStale handles, in one transaction, up to limit queued tasks of
// open jobs that are stale at at (store.Staleness: neither their last
// publish nor at.Busy is within their job's task timeout, see
// warren.Policy.EffectiveTaskTimeout, plus at.Grace before at.Now),
// oldest publish first. claimStaleSQL claims them; store.SplitLost
// decides which go back to pending and which fail as lost; one pipelined
// round trip applies the two sets by guarded updates, each with
// attempts+1 (the failed ones with finished_at at.Now and
// store.LostError); and the failed ones move their
// jobs' failed counters as ApplyOutcomes would, job rows in id order after
// the task rows. ReadyToClose lists, once each and in id order, the jobs
// this made ready to close (store.BecameReady).
//
// Several servers may call it at once: the tasks are claimed with
// FOR UPDATE SKIP LOCKED and stay locked until the commit, so each is
// handled by one call. Such a claim never waits for a task lock, so the
// order it takes them in (oldest publish first) cannot close a cycle with
// the package's lock order. limit <= 0 means store.DefaultPageSize.
func (s *Store) ReconcileStale(ctx context.Context, at store.Staleness, limit int) (store.ReconcileReport, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return store.ReconcileReport{}, fmt.Errorf("postgres: reconcile stale tasks: %w", err)
	}
	defer rollback(ctx, tx)

	micro := func(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }
	now := micro(at.Now)
	rows, err := tx.Query(ctx, claimStaleSQL, micro(at.Cutoff()), warren.DefaultTaskTimeout.Milliseconds(), store.PageSize(limit), micro(at.Busy))
	if err != nil {
		return store.ReconcileReport{}, fmt.Errorf("postgres: reconcile stale tasks: %w", err)
	}
	stale, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.StaleTask, error) {
		var t store.StaleTask
		err := row.Scan(&t.JobID, &t.TaskID, &t.Attempts, &t.MaxRetries)
		return t, err
	})
	if err != nil {
		return store.ReconcileReport{}, fmt.Errorf("postgres: reconcile stale tasks: %w", err)
	}
	requeue, fail := store.SplitLost(stale)
	report, deltas, err := applyLost(ctx, tx, requeue, fail, now)
	if err != nil {
		return store.ReconcileReport{}, fmt.Errorf("postgres: reconcile stale tasks: %w", err)
	}
	if report.ReadyToClose, err = bumpCounters(ctx, tx, deltas); err != nil {
		return store.ReconcileReport{}, fmt.Errorf("postgres: reconcile stale tasks: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return store.ReconcileReport{}, fmt.Errorf("postgres: reconcile stale tasks: commit: %w", err)
	}
	return report, nil
}

// applyLost applies requeueLostSQL to requeue and failLostSQL to fail, as
// lost at now, in one pipelined round trip, and returns how many tasks
// each moved and the failed counts by job.
func applyLost(ctx context.Context, tx pgx.Tx, requeue, fail []store.TaskRef, now time.Time) (store.ReconcileReport, map[string]*counts, error) {
	var report store.ReconcileReport
	deltas := make(map[string]*counts)
	if len(requeue) == 0 && len(fail) == 0 {
		return report, deltas, nil
	}
	requeueJobs, requeueTasks := splitRefs(requeue)
	failJobs, failTasks := splitRefs(fail)
	b := &pgx.Batch{}
	b.Queue(requeueLostSQL, requeueJobs, requeueTasks)
	b.Queue(failLostSQL, failJobs, failTasks, store.LostError, now)
	br := tx.SendBatch(ctx, b)
	tag, err := br.Exec()
	if err != nil {
		_ = br.Close()
		return report, nil, err
	}
	report.Requeued = int(tag.RowsAffected())
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return report, nil, err
	}
	for rows.Next() {
		var jobID string
		if err := rows.Scan(&jobID); err != nil {
			rows.Close()
			_ = br.Close()
			return report, nil, err
		}
		report.Failed++
		if deltas[jobID] == nil {
			deltas[jobID] = &counts{}
		}
		deltas[jobID].failed++
	}
	if err := rows.Err(); err != nil {
		_ = br.Close()
		return report, nil, err
	}
	if err := br.Close(); err != nil {
		return report, nil, err
	}
	return report, deltas, nil
}
