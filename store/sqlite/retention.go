package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/warrenhq/warren/store"
)

// expiringByDefaultSQL selects up to ?2 closed jobs without a retention
// of their own that closed at or before ?1 (store.Expiry.DefaultCutoff),
// the first closed first, through jobs_expiring_by_default.
const expiringByDefaultSQL = `SELECT id, finished_at, retention_ms FROM jobs INDEXED BY jobs_expiring_by_default
	WHERE retention_ms = 0 AND finished_at IS NOT NULL AND finished_at <= ?1
	  AND state IN ('completed', 'failed', 'cancelled')
	ORDER BY finished_at
	LIMIT ?2`

// expiringByOwnSQL selects up to ?2 closed jobs with a retention of their
// own that ended at or before ?1, the first ended first, through
// jobs_expiring_by_own.
const expiringByOwnSQL = `SELECT id, finished_at, retention_ms FROM jobs INDEXED BY jobs_expiring_by_own
	WHERE retention_ms > 0 AND finished_at IS NOT NULL AND finished_at + 1000 * retention_ms <= ?1
	  AND state IN ('completed', 'failed', 'cancelled')
	ORDER BY finished_at + 1000 * retention_ms
	LIMIT ?2`

// deleteJobsSQL deletes the closed jobs of the JSON array of ids ?1 and
// returns the id and number of tasks of each it deleted.
const deleteJobsSQL = `DELETE FROM jobs
	WHERE id IN (SELECT value FROM json_each(?1)) AND state IN ('completed', 'failed', 'cancelled')
	RETURNING id, expected_tasks`

// recordDeletedSQL records the jobs of the JSON array ?1 of [id, tasks]
// pairs in deleted_jobs, deleted at ?2.
const recordDeletedSQL = `INSERT INTO deleted_jobs (job_id, deleted_at, tasks)
	SELECT value ->> 0, ?2, value ->> 1 FROM json_each(?1)`

// DeleteExpiredJobs deletes, in one write transaction, up to limit closed
// jobs that have expired at at, those that expired first first (limit <= 0
// means store.DefaultPageSize): the two indexed queries select the
// candidates that closed before the default cutoff
// (store.Expiry.DefaultCutoff) and those whose own retention ended,
// store.Expiry.PickExpired picks among them, and deleteJobs deletes them,
// leaving their tasks for PurgeDeletedTasks. A reopened job has no
// finished_at, so it is not a candidate until it closes again. Writes are
// serialised, so concurrent calls never delete a job twice. A reader
// looks first, so that a sweep that finds nothing to delete never takes
// the writer.
func (s *Store) DeleteExpiredJobs(ctx context.Context, at store.Expiry, limit int) (int, error) {
	limit = store.PageSize(limit)
	expired, err := expiredJobs(ctx, s.r, at, limit)
	if err != nil {
		return 0, fmt.Errorf("sqlite: delete expired jobs: %w", err)
	}
	if len(expired) == 0 {
		return 0, nil
	}
	var deleted int
	err = s.inTxKeepingTasks(ctx, func(tx *sql.Tx) error {
		expired, err := expiredJobs(ctx, tx, at, limit)
		if err != nil {
			return err
		}
		deleted, err = deleteJobs(ctx, tx, expired)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sqlite: delete expired jobs: %w", err)
	}
	return deleted, nil
}

// expiredJobs returns the ids of up to limit jobs expired at at, as
// store.Expiry.PickExpired picks them among the candidates of both
// indexed queries.
func expiredJobs(ctx context.Context, q querier, at store.Expiry, limit int) ([]string, error) {
	var candidates []store.ExpiringJob
	if cutoff, ok := at.DefaultCutoff(); ok {
		jobs, err := expiringJobs(ctx, q, expiringByDefaultSQL, cutoff, limit)
		if err != nil {
			return nil, err
		}
		candidates = append(candidates, jobs...)
	}
	jobs, err := expiringJobs(ctx, q, expiringByOwnSQL, at.Now, limit)
	if err != nil {
		return nil, err
	}
	return at.PickExpired(append(candidates, jobs...), limit), nil
}

// expiringJobs reads the candidates that query (expiringByDefaultSQL or
// expiringByOwnSQL) selects with bound and limit.
func expiringJobs(ctx context.Context, q querier, query string, bound time.Time, limit int) ([]store.ExpiringJob, error) {
	rows, err := q.QueryContext(ctx, query, bound.UnixMicro(), limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var jobs []store.ExpiringJob
	for rows.Next() {
		var (
			j                     store.ExpiringJob
			finished, retentionMS int64
		)
		if err := rows.Scan(&j.ID, &finished, &retentionMS); err != nil {
			return nil, err
		}
		j.FinishedAt = *timeOf(sql.NullInt64{Int64: finished, Valid: true})
		j.Retention = time.Duration(retentionMS) * time.Millisecond
		jobs = append(jobs, j)
	}
	return jobs, rows.Err()
}

// DeleteJob deletes closed job id, whatever its retention, in one write
// transaction, as DeleteExpiredJobs deletes an expired one. An open job
// wraps store.ErrJobOpen, an unknown one warren.ErrNotFound.
func (s *Store) DeleteJob(ctx context.Context, id string) error {
	err := s.inTxKeepingTasks(ctx, func(tx *sql.Tx) error {
		j, err := getJob(ctx, tx, "id = ?", id)
		if err != nil {
			return err
		}
		if !j.State.Terminal() {
			return fmt.Errorf("job is %s: %w", j.State, store.ErrJobOpen)
		}
		_, err = deleteJobs(ctx, tx, []string{id})
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite: delete job %s: %w", id, err)
	}
	return nil
}

// deleteJobs deletes the rows, reduced results and webhook deliveries of
// the closed jobs of ids (an open one is left as it is) and records each
// deleted one in
// deleted_jobs, whose task rows PurgeDeletedTasks deletes later. It
// returns how many jobs it deleted. It must run in inTxKeepingTasks:
// with foreign keys on, deleting a job would delete its tasks too, all in
// this transaction.
func deleteJobs(ctx context.Context, tx *sql.Tx, ids []string) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	set, err := json.Marshal(ids)
	if err != nil {
		return 0, err
	}
	rows, err := tx.QueryContext(ctx, deleteJobsSQL, string(set))
	if err != nil {
		return 0, err
	}
	var deleted [][2]any // [id, tasks]
	for rows.Next() {
		var (
			id    string
			tasks int64
		)
		if err := rows.Scan(&id, &tasks); err != nil {
			rows.Close()
			return 0, err
		}
		deleted = append(deleted, [2]any{id, tasks})
	}
	if err := rows.Close(); err != nil {
		return 0, err
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(deleted) == 0 {
		return 0, nil
	}
	if set, err = json.Marshal(deleted); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM job_results WHERE job_id IN (SELECT value ->> 0 FROM json_each(?1))`, string(set)); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM webhook_deliveries WHERE job_id IN (SELECT value ->> 0 FROM json_each(?1))`, string(set)); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, recordDeletedSQL, string(set), now().UnixMicro()); err != nil {
		return 0, err
	}
	return len(deleted), nil
}

// PurgeDeletedTasks deletes, in one write transaction, up to limit task
// rows of deleted jobs (limit <= 0 means store.DefaultPageSize), the jobs
// deleted first first: store.PlanPurge decides which task id ranges of
// which jobs, each range is deleted through the tasks' primary key, and
// each job's progress is recorded, or the job forgotten once it has no
// task left. It returns how many task rows it deleted. A reader looks
// first, so that a sweep with nothing to purge never takes the writer.
func (s *Store) PurgeDeletedTasks(ctx context.Context, limit int) (int, error) {
	limit = store.PageSize(limit)
	var pending bool
	if err := s.r.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM deleted_jobs)`).Scan(&pending); err != nil {
		return 0, fmt.Errorf("sqlite: purge tasks of deleted jobs: %w", err)
	}
	if !pending {
		return 0, nil
	}
	var purged int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		purged = 0
		jobs, err := deletedJobs(ctx, tx, limit)
		if err != nil {
			return err
		}
		for _, r := range store.PlanPurge(jobs, limit) {
			n, err := purgeRange(ctx, tx, r)
			if err != nil {
				return err
			}
			purged += n
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("sqlite: purge tasks of deleted jobs: %w", err)
	}
	return int(purged), nil
}

// deletedJobs returns up to limit deleted jobs whose tasks are to be
// purged, the first deleted first.
func deletedJobs(ctx context.Context, tx *sql.Tx, limit int) ([]store.DeletedJob, error) {
	rows, err := tx.QueryContext(ctx, `SELECT job_id, tasks, purged FROM deleted_jobs ORDER BY rowid LIMIT ?`, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var jobs []store.DeletedJob
	for rows.Next() {
		var j store.DeletedJob
		if err := rows.Scan(&j.ID, &j.Tasks, &j.Purged); err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return jobs, rows.Err()
}

// purgeRange deletes the task rows of r and records it: the job's
// progress, or, for its last range, that it is purged. It returns how
// many task rows it deleted.
func purgeRange(ctx context.Context, tx *sql.Tx, r store.PurgeRange) (int64, error) {
	var (
		res sql.Result
		err error
	)
	if r.Last {
		res, err = tx.ExecContext(ctx, `DELETE FROM tasks WHERE job_id = ? AND task_id > ?`, r.JobID, r.After)
	} else {
		res, err = tx.ExecContext(ctx, `DELETE FROM tasks WHERE job_id = ? AND task_id > ? AND task_id <= ?`, r.JobID, r.After, r.Through)
	}
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	if r.Last {
		_, err = tx.ExecContext(ctx, `DELETE FROM deleted_jobs WHERE job_id = ?`, r.JobID)
	} else {
		_, err = tx.ExecContext(ctx, `UPDATE deleted_jobs SET purged = ? WHERE job_id = ?`, r.Through, r.JobID)
	}
	return n, err
}

// inTxKeepingTasks runs fn in a write transaction, as inTx does, on the
// writer connection with its foreign keys off, and turns them on again
// before any other write may use the connection. The tasks table's
// foreign key deletes a job's tasks with its row (ON DELETE CASCADE), all
// in one transaction, and deleting a million task rows holds the one
// writer for seconds; with the keys off, a job's row goes at once and
// PurgeDeletedTasks deletes its tasks in batches. The keys cannot be
// switched inside a transaction, hence the connection held throughout. A
// connection whose keys could not be turned on again is discarded, and
// the pool opens a new one, with them on.
func (s *Store) inTxKeepingTasks(ctx context.Context, fn func(tx *sql.Tx) error) (err error) {
	conn, err := s.w.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `PRAGMA foreign_keys = OFF`); err != nil {
		return err
	}
	defer func() {
		if _, onErr := conn.ExecContext(context.WithoutCancel(ctx), `PRAGMA foreign_keys = ON`); onErr != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
			err = errors.Join(err, fmt.Errorf("turn foreign keys on again: %w", onErr))
		}
	}()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}
