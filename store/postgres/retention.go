package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// expiringByDefaultSQL claims up to $2 closed jobs without a retention of
// their own that closed at or before $1 (store.Expiry.DefaultCutoff), the
// first closed first, through jobs_expiring_by_default_idx, skipping the
// rows another transaction holds.
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

// deleteJobsSQL deletes the closed jobs of $1 (their reduced results and
// webhook deliveries go with them: ON DELETE CASCADE), records each in deleted_jobs at $2 with
// its number of tasks, for PurgeDeletedTasks, and returns their ids.
const deleteJobsSQL = `
	WITH gone AS (
		DELETE FROM jobs WHERE id = ANY($1) AND state IN ('completed', 'failed', 'cancelled')
		RETURNING id, expected_tasks
	)
	INSERT INTO deleted_jobs (job_id, deleted_at, tasks) SELECT id, $2, expected_tasks FROM gone
	RETURNING job_id`

// claimDeletedSQL claims up to $1 deleted jobs whose tasks are to be
// purged, the first deleted first, skipping those another purge holds.
const claimDeletedSQL = `
	SELECT job_id, tasks, purged FROM deleted_jobs
	ORDER BY deleted_at, job_id
	LIMIT $1
	FOR UPDATE SKIP LOCKED`

// purgeTasksSQL deletes the task rows of the ranges ($1, $2, $3): of job
// $1, the task ids after $2 through $3. Each range is an index range scan
// of tasks_pkey, taken in the order given.
const purgeTasksSQL = `
	DELETE FROM tasks t
	USING unnest($1::text[], $2::bigint[], $3::bigint[]) AS r(job_id, after, through)
	WHERE t.job_id = r.job_id AND t.task_id > r.after AND t.task_id <= r.through`

// purgedSQL records that the deleted jobs $1 are purged through their
// task ids $2.
const purgedSQL = `
	UPDATE deleted_jobs d SET purged = r.through
	FROM unnest($1::text[], $2::bigint[]) AS r(job_id, through)
	WHERE d.job_id = r.job_id`

// DeleteExpiredJobs deletes, in one transaction, up to limit closed jobs
// that have expired at at, those that expired first first (limit <= 0
// means store.DefaultPageSize): the two indexed queries claim the
// candidates that closed before the default cutoff
// (store.Expiry.DefaultCutoff) and those whose own retention ended,
// store.Expiry.PickExpired picks among them, and deleteJobsSQL deletes
// them, leaving their tasks for PurgeDeletedTasks. A reopened job has no
// finished_at and is open, so it is not a candidate until it closes
// again.
//
// Several servers may call it at once: the candidates are claimed with
// FOR UPDATE SKIP LOCKED, so each job is deleted by one call. Only job
// rows are locked, never a task row, and a claim never waits: a
// transaction that holds a job's tasks and waits for its row (a redrive)
// waits for the commit, then finds the job gone.
func (s *Store) DeleteExpiredJobs(ctx context.Context, at store.Expiry, limit int) (int, error) {
	limit = store.PageSize(limit)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("postgres: delete expired jobs: %w", err)
	}
	defer rollback(ctx, tx)

	var candidates []store.ExpiringJob
	if cutoff, ok := at.DefaultCutoff(); ok {
		if candidates, err = expiringJobs(ctx, tx, expiringByDefaultSQL, cutoff, limit); err != nil {
			return 0, err
		}
	}
	own, err := expiringJobs(ctx, tx, expiringByOwnSQL, at.Now, limit)
	if err != nil {
		return 0, err
	}
	ids := at.PickExpired(append(candidates, own...), limit)
	if len(ids) == 0 {
		return 0, nil
	}
	deleted, err := s.deleteJobs(ctx, tx, ids)
	if err != nil {
		return 0, fmt.Errorf("postgres: delete expired jobs: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("postgres: delete expired jobs: commit: %w", err)
	}
	return deleted, nil
}

// expiringJobs claims the candidates that query (expiringByDefaultSQL or
// expiringByOwnSQL) selects with bound and limit.
func expiringJobs(ctx context.Context, tx pgx.Tx, query string, bound time.Time, limit int) ([]store.ExpiringJob, error) {
	rows, err := tx.Query(ctx, query, bound.UTC().Truncate(time.Microsecond), limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: delete expired jobs: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.ExpiringJob, error) {
		var (
			j           store.ExpiringJob
			retentionMS int64
		)
		err := row.Scan(&j.ID, &j.FinishedAt, &retentionMS)
		j.Retention = time.Duration(retentionMS) * time.Millisecond
		return j, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: delete expired jobs: %w", err)
	}
	return jobs, nil
}

// deleteJobs applies deleteJobsSQL to ids and returns how many jobs it
// deleted.
func (s *Store) deleteJobs(ctx context.Context, tx pgx.Tx, ids []string) (int, error) {
	tag, err := tx.Exec(ctx, deleteJobsSQL, ids, s.clock())
	if err != nil {
		return 0, err
	}
	return int(tag.RowsAffected()), nil
}

// DeleteJob deletes closed job id, whatever its retention, in one
// transaction, as DeleteExpiredJobs deletes an expired one. It locks the
// job's row, and no task row. An open job: store.ErrJobOpen; an unknown
// one: warren.ErrNotFound.
func (s *Store) DeleteJob(ctx context.Context, id string) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: delete job %q: %w", id, err)
	}
	defer rollback(ctx, tx)

	var state string
	err = tx.QueryRow(ctx, `SELECT state FROM jobs WHERE id = $1 FOR UPDATE`, id).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return notFound(id)
	}
	if err != nil {
		return fmt.Errorf("postgres: delete job %q: %w", id, err)
	}
	if !warren.JobState(state).Terminal() {
		return fmt.Errorf("postgres: delete job %q: job is %s: %w", id, state, store.ErrJobOpen)
	}
	if _, err := s.deleteJobs(ctx, tx, []string{id}); err != nil {
		return fmt.Errorf("postgres: delete job %q: %w", id, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres: delete job %q: commit: %w", id, err)
	}
	return nil
}

// PurgeDeletedTasks deletes, in one transaction, up to limit task rows of
// deleted jobs (limit <= 0 means store.DefaultPageSize): it claims up to
// limit deleted jobs, the first deleted first, skipping those another
// purge holds; store.PlanPurge decides which task id ranges of which of
// them; and one pipelined round trip deletes the ranges, job by job in id
// order (the package's lock order for task rows, which an aggregator
// recording a late outcome for one of them follows too), records each
// job's progress and forgets the jobs left without a task. It locks no
// job row. It returns how many task rows it deleted.
func (s *Store) PurgeDeletedTasks(ctx context.Context, limit int) (int, error) {
	limit = store.PageSize(limit)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("postgres: purge tasks of deleted jobs: %w", err)
	}
	defer rollback(ctx, tx)

	rows, err := tx.Query(ctx, claimDeletedSQL, limit)
	if err != nil {
		return 0, fmt.Errorf("postgres: purge tasks of deleted jobs: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.DeletedJob, error) {
		var j store.DeletedJob
		err := row.Scan(&j.ID, &j.Tasks, &j.Purged)
		return j, err
	})
	if err != nil {
		return 0, fmt.Errorf("postgres: purge tasks of deleted jobs: %w", err)
	}
	plan := store.PlanPurge(jobs, limit)
	if len(plan) == 0 {
		return 0, nil
	}
	slices.SortFunc(plan, func(a, b store.PurgeRange) int { return strings.Compare(a.JobID, b.JobID) })
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
		} else {
			partial, progress = append(partial, r.JobID), append(progress, r.Through)
		}
		ids, afters, throughs = append(ids, r.JobID), append(afters, r.After), append(throughs, through)
	}
	b := &pgx.Batch{}
	b.Queue(purgeTasksSQL, ids, afters, throughs)
	b.Queue(purgedSQL, partial, progress)
	b.Queue(`DELETE FROM deleted_jobs WHERE job_id = ANY($1)`, done)
	br := tx.SendBatch(ctx, b)
	tag, err := br.Exec()
	if err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("postgres: purge tasks of deleted jobs: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("postgres: purge tasks of deleted jobs: commit: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
