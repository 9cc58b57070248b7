package postgres

import (
	"context"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/internal/engine"
)

// ReadClock implements engine.Driver: the database server's clock, the one
// every server sharing the database reads alike (clock_timestamp(), not
// now(): the time of the reading, not of a transaction's start).
func (d engineDriver) ReadClock(ctx context.Context) (time.Time, error) {
	var t time.Time
	if err := d.s.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&t); err != nil {
		return time.Time{}, err
	}
	return t, nil
}

// claimStaleSQL claims up to $3 queued tasks of open jobs that are stale
// (engine.StaleQuery): greatest(queued_at, $4) is more than their job's
// task timeout before $1, the cutoff; $2 is the default timeout in
// milliseconds, $4 the busy time. Oldest publish first, skipping rows
// another transaction holds; it returns what the engine splits lost tasks by.
//
// The first queued_at bound, with the shortest timeout of any open job,
// lets tasks_queued_idx yield only the tasks queued before it, in order;
// it is NULL, so that nothing is read, while the busy time keeps every
// task from being stale (a backlog keeps the queues busy, and the tasks
// behind it need not be walked at every pass). The last condition
// applies each task's own job's timeout, and leaves out a paused job's
// tasks and a paused queue's (whose queue_pauses row stands for the
// cutoff itself); after a resume, the job's or its queue's resumed_at
// counts as a publish, so the time spent paused never counts toward a
// task's timeout (greatest ignores NULLs). A task another transaction
// finished or cancelled after this statement's snapshot is re-checked
// once locked and left out. The job rows are read, not locked: closing a
// job locks its unfinished tasks first, which this claim either holds
// (the close waits) or skips.
const claimStaleSQL = `
	SELECT t.job_id, t.task_id, t.attempts, t.generation, j.max_retries
	FROM tasks t JOIN jobs j ON j.id = t.job_id
	WHERE t.state = 'queued'
	  AND t.queued_at < (SELECT CASE WHEN $4::timestamptz < bound THEN bound END
	      FROM (SELECT $1::timestamptz - interval '1 millisecond' *
	                min(CASE WHEN task_timeout_ms > 0 THEN task_timeout_ms ELSE $2::bigint END) AS bound
	            FROM jobs WHERE state IN ('pending', 'running')) AS b)
	  AND j.state IN ('pending', 'running') AND j.paused_at IS NULL
	  AND greatest(t.queued_at, $4::timestamptz, j.resumed_at,
	      (SELECT CASE WHEN qp.paused_at IS NULL THEN qp.resumed_at ELSE $1::timestamptz END
	       FROM queue_pauses qp WHERE qp.queue = CASE WHEN j.queue = '' THEN 'default' ELSE j.queue END))
	      < $1::timestamptz - interval '1 millisecond' *
	      CASE WHEN j.task_timeout_ms > 0 THEN j.task_timeout_ms ELSE $2::bigint END
	ORDER BY t.queued_at
	LIMIT $3
	FOR UPDATE OF t SKIP LOCKED`

// ClaimStale implements engine.StaleTx: one statement.
func (t *tx) ClaimStale(ctx context.Context, q engine.StaleQuery) ([]engine.StaleTask, error) {
	rows, err := t.tx.Query(ctx, claimStaleSQL, q.Cutoff, q.DefaultTimeout.Milliseconds(), q.Limit, q.Busy)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (engine.StaleTask, error) {
		var s engine.StaleTask
		err := row.Scan(&s.JobID, &s.TaskID, &s.Attempts, &s.Generation, &s.MaxRetries)
		return s, err
	})
}

// requeueLostSQL sends the tasks named by ($1, $2) that are still queued
// back to pending with attempts+1, at their next generation.
const requeueLostSQL = `
	UPDATE tasks SET state = 'pending', attempts = tasks.attempts + 1, generation = tasks.generation + 1
	FROM unnest($1::text[], $2::bigint[]) AS r(job_id, task_id)
	WHERE tasks.job_id = r.job_id AND tasks.task_id = r.task_id AND tasks.state = 'queued'`

// failLostSQL fails the tasks named by ($1, $2) that are still queued with
// the error $3, finished_at $4 and attempts+1, and returns them.
const failLostSQL = `
	UPDATE tasks SET state = 'failed', attempts = tasks.attempts + 1, error = $3, finished_at = $4
	FROM unnest($1::text[], $2::bigint[]) AS r(job_id, task_id)
	WHERE tasks.job_id = r.job_id AND tasks.task_id = r.task_id AND tasks.state = 'queued'
	RETURNING tasks.job_id, tasks.task_id`

// SettleLost implements engine.StaleTx: both sets in one pipelined round
// trip.
func (t *tx) SettleLost(ctx context.Context, l engine.LostTasks) (requeued int, failed []store.TaskRef, err error) {
	requeueJobs, requeueTasks := splitRefs(l.Requeue)
	failJobs, failTasks := splitRefs(l.Fail)
	b := &pgx.Batch{}
	b.Queue(requeueLostSQL, requeueJobs, requeueTasks)
	b.Queue(failLostSQL, failJobs, failTasks, l.Error, l.At)
	br := t.tx.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			requeued, failed, err = 0, nil, cerr
		}
	}()
	tag, err := br.Exec()
	if err != nil {
		return 0, nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return 0, nil, err
	}
	failed, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.TaskRef, error) {
		var r store.TaskRef
		err := row.Scan(&r.JobID, &r.TaskID)
		return r, err
	})
	if err != nil {
		return 0, nil, err
	}
	return int(tag.RowsAffected()), failed, nil
}

// expiringByDefaultSQL claims up to $2 closed jobs without a retention of
// their own that closed at or before $1, the first closed first, through
// jobs_expiring_by_default_idx, skipping the rows another transaction
// holds.
const expiringByDefaultSQL = `
	SELECT id, finished_at, retention_ms FROM jobs
	WHERE retention_ms = 0 AND state IN ('completed', 'failed', 'cancelled') AND finished_at <= $1
	ORDER BY finished_at
	LIMIT $2
	FOR UPDATE SKIP LOCKED`

// expiringByOwnSQL claims up to $2 closed jobs with a retention of their
// own that ended at or before $1, the first ended first, through
// jobs_expiring_by_own_idx, skipping the rows another transaction holds.
const expiringByOwnSQL = `
	SELECT id, finished_at, retention_ms FROM jobs
	WHERE retention_ms > 0 AND state IN ('completed', 'failed', 'cancelled')
	  AND warren_expires_at(finished_at, retention_ms) <= $1
	ORDER BY warren_expires_at(finished_at, retention_ms)
	LIMIT $2
	FOR UPDATE SKIP LOCKED`

// ExpiringJobs implements engine.RetentionReader: both claims in one
// pipelined round trip.
func (t *tx) ExpiringJobs(ctx context.Context, q engine.ExpiringQuery) (jobs []engine.ExpiringJob, err error) {
	b := &pgx.Batch{}
	if q.ByDefault {
		b.Queue(expiringByDefaultSQL, q.DefaultCutoff, q.Limit)
	}
	b.Queue(expiringByOwnSQL, q.Now, q.Limit)
	br := t.tx.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			jobs, err = nil, cerr
		}
	}()
	for range b.Len() {
		rows, err := br.Query()
		if err != nil {
			return nil, err
		}
		kind, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (engine.ExpiringJob, error) {
			var (
				j           engine.ExpiringJob
				retentionMS int64
			)
			err := row.Scan(&j.ID, &j.FinishedAt, &retentionMS)
			j.Retention = time.Duration(retentionMS) * time.Millisecond
			return j, err
		})
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, kind...)
	}
	return jobs, nil
}

// claimDeletedSQL claims up to $1 deleted jobs whose tasks are to be
// purged, the first deleted first, skipping those another purge holds.
const claimDeletedSQL = `
	SELECT job_id, tasks, purged FROM deleted_jobs
	ORDER BY deleted_at, job_id
	LIMIT $1
	FOR UPDATE SKIP LOCKED`

// DeletedJobs implements engine.RetentionReader.
func (t *tx) DeletedJobs(ctx context.Context, limit int) ([]engine.DeletedJob, error) {
	rows, err := t.tx.Query(ctx, claimDeletedSQL, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (engine.DeletedJob, error) {
		var j engine.DeletedJob
		err := row.Scan(&j.ID, &j.Tasks, &j.Purged)
		return j, err
	})
}

// deleteJobsSQL deletes the closed jobs of $1 (their reduced results and
// webhook deliveries go with them: ON DELETE CASCADE; their tasks have no
// foreign key, and stay), records each in deleted_jobs at $2 with its
// number of tasks, for PurgeDeletedTasks, and returns their ids.
const deleteJobsSQL = `
	WITH gone AS (
		DELETE FROM jobs WHERE id = ANY($1) AND state IN ('completed', 'failed', 'cancelled')
		RETURNING id, expected_tasks
	), parts AS (
		DELETE FROM spawn_parts WHERE job_id IN (SELECT id FROM gone)
	)
	INSERT INTO deleted_jobs (job_id, deleted_at, tasks) SELECT id, $2, expected_tasks FROM gone
	RETURNING job_id`

// DeleteJobs implements engine.RetentionTx: one statement.
func (t *tx) DeleteJobs(ctx context.Context, ids []string, at time.Time) (int, error) {
	tag, err := t.tx.Exec(ctx, deleteJobsSQL, ids, at)
	if err != nil {
		return 0, err
	}
	return int(tag.RowsAffected()), nil
}

// purgeTasksSQL deletes the task rows of the ranges ($1, $2, $3): of job
// $1, the task ids after $2 through $3. Each range is an index range scan
// of tasks_pkey, taken in the order given.
const purgeTasksSQL = `
	DELETE FROM tasks t
	USING unnest($1::text[], $2::bigint[], $3::bigint[]) AS r(job_id, after, through)
	WHERE t.job_id = r.job_id AND t.task_id > r.after AND t.task_id <= r.through`

// purgeAttemptsSQL deletes the attempt rows of the ranges purgeTasksSQL
// deletes the task rows of.
const purgeAttemptsSQL = `
	DELETE FROM task_attempts a
	USING unnest($1::text[], $2::bigint[], $3::bigint[]) AS r(job_id, after, through)
	WHERE a.job_id = r.job_id AND a.task_id > r.after AND a.task_id <= r.through`

// purgedSQL records that the deleted jobs $1 are purged through their
// task ids $2.
const purgedSQL = `
	UPDATE deleted_jobs d SET purged = r.through
	FROM unnest($1::text[], $2::bigint[]) AS r(job_id, through)
	WHERE d.job_id = r.job_id`

// PurgeTasks implements engine.RetentionTx: the ranges, the progress and
// the forgotten jobs in one pipelined round trip.
func (t *tx) PurgeTasks(ctx context.Context, plan []engine.PurgeRange) (int, error) {
	var (
		ids, partial, done []string
		afters, throughs   []int64
		progress           []int64
	)
	for _, r := range plan {
		through := r.Through
		if r.Last {
			through = math.MaxInt64 // every task left, whatever its id
			done = append(done, r.JobID)
			// and the reduce task, task 0, which no range counts
			ids, afters, throughs = append(ids, r.JobID), append(afters, -1), append(throughs, 0)
		} else {
			partial, progress = append(partial, r.JobID), append(progress, r.Through)
		}
		ids, afters, throughs = append(ids, r.JobID), append(afters, r.After), append(throughs, through)
	}
	b := &pgx.Batch{}
	b.Queue(purgeTasksSQL, ids, afters, throughs)
	b.Queue(purgeAttemptsSQL, ids, afters, throughs)
	b.Queue(purgedSQL, partial, progress)
	b.Queue(`DELETE FROM deleted_jobs WHERE job_id = ANY($1)`, done)
	br := t.tx.SendBatch(ctx, b)
	tag, err := br.Exec()
	for range 3 {
		if err == nil {
			_, err = br.Exec()
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	return int(tag.RowsAffected()), nil
}
