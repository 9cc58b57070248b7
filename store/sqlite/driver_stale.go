package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/internal/engine"
)

// ReadClock implements engine.Driver: the database is this process's, and
// so is its clock.
func (engineDriver) ReadClock(context.Context) (time.Time, error) { return time.Now(), nil }

// staleSQL selects up to ?3 queued tasks of open jobs that are stale
// (engine.StaleQuery): max(queued_at, ?4) is more than their job's task
// timeout before ?1, the cutoff; ?2 is the default timeout in
// milliseconds, ?4 the busy time. Oldest publish first.
//
// The first queued_at bound, with the shortest timeout of any open job,
// is what lets tasks_queued read only the tasks queued before it; it is
// NULL, so that nothing is read, while the busy time keeps every task
// from being stale (a backlog keeps the queues busy, and the tasks behind
// it need not be walked at every pass). The last condition applies each
// task's own job's timeout. CROSS JOIN makes SQLite walk the tasks first,
// so nothing is sorted.
//
// A task of a paused job is never stale, nor one of a paused queue (its
// queue_pauses row stands for the cutoff itself, which no time is before);
// after a resume, the job's or its queue's resumed_at counts as a
// publish: the time spent paused never counts toward a task's timeout.
const staleSQL = `SELECT t.job_id, t.task_id, t.attempts, t.generation, j.max_retries
	FROM tasks AS t INDEXED BY tasks_queued CROSS JOIN jobs AS j
	WHERE t.state = 'queued'
	  AND t.queued_at < (SELECT CASE WHEN ?4 < bound THEN bound END
	      FROM (SELECT ?1 - 1000 * MIN(CASE WHEN task_timeout_ms > 0 THEN task_timeout_ms ELSE ?2 END) AS bound
	            FROM jobs WHERE state IN ('pending', 'running')))
	  AND j.id = t.job_id AND j.state IN ('pending', 'running') AND j.paused_at IS NULL
	  AND max(t.queued_at, ?4, coalesce(j.resumed_at, 0), coalesce((SELECT CASE WHEN qp.paused_at IS NULL THEN qp.resumed_at ELSE ?1 END
	      FROM queue_pauses AS qp WHERE qp.queue = CASE WHEN j.queue = '' THEN 'default' ELSE j.queue END), 0))
	      < ?1 - 1000 * CASE WHEN j.task_timeout_ms > 0 THEN j.task_timeout_ms ELSE ?2 END
	ORDER BY t.queued_at
	LIMIT ?3`

// ClaimStale implements engine.StaleTx. Write transactions are
// serialised, so no other one can hold the tasks it reads.
func (t *tx) ClaimStale(ctx context.Context, q engine.StaleQuery) ([]engine.StaleTask, error) {
	rows, err := t.tx.QueryContext(ctx, staleSQL, q.Cutoff.UnixMicro(), q.DefaultTimeout.Milliseconds(), q.Limit, q.Busy.UnixMicro())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var tasks []engine.StaleTask
	for rows.Next() {
		var s engine.StaleTask
		if err := rows.Scan(&s.JobID, &s.TaskID, &s.Attempts, &s.Generation, &s.MaxRetries); err != nil {
			return nil, err
		}
		tasks = append(tasks, s)
	}
	return tasks, rows.Err()
}

// lostRefsSQL is the set of tasks named by the JSON array of [job_id,
// task_id] pairs in parameter ?1, so that one statement of one parameter
// updates a set of any size.
const lostRefsSQL = `(SELECT value ->> 0 AS job_id, value ->> 1 AS task_id FROM json_each(?1))`

// requeueLostSQL sends the tasks of the set ?1 (lostRefsSQL) that are
// still queued back to pending with attempts+1, at their next generation.
const requeueLostSQL = `UPDATE tasks SET state = 'pending', attempts = attempts + 1, generation = generation + 1
	FROM ` + lostRefsSQL + ` AS r
	WHERE tasks.job_id = r.job_id AND tasks.task_id = r.task_id AND tasks.state = 'queued'`

// failLostSQL fails the tasks of the set ?1 (lostRefsSQL) that are still
// queued with the error ?2, finished_at ?3 and attempts+1, and returns
// them.
const failLostSQL = `UPDATE tasks SET state = 'failed', attempts = attempts + 1, error = ?2, finished_at = ?3
	FROM ` + lostRefsSQL + ` AS r
	WHERE tasks.job_id = r.job_id AND tasks.task_id = r.task_id AND tasks.state = 'queued'
	RETURNING tasks.job_id, tasks.task_id`

// SettleLost implements engine.StaleTx: one statement for each set.
func (t *tx) SettleLost(ctx context.Context, l engine.LostTasks) (int, []store.TaskRef, error) {
	requeued, err := t.requeueLost(ctx, l.Requeue)
	if err != nil {
		return 0, nil, err
	}
	failed, err := t.failLost(ctx, l.Fail, l.Error, l.At)
	if err != nil {
		return 0, nil, err
	}
	return requeued, failed, nil
}

// requeueLost applies requeueLostSQL to refs and returns how many tasks it
// moved.
func (t *tx) requeueLost(ctx context.Context, refs []store.TaskRef) (int, error) {
	if len(refs) == 0 {
		return 0, nil
	}
	set, err := lostRefsJSON(refs)
	if err != nil {
		return 0, err
	}
	res, err := t.tx.ExecContext(ctx, requeueLostSQL, set)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// failLost applies failLostSQL to refs, failing them with msg at at, and
// returns the tasks it failed.
func (t *tx) failLost(ctx context.Context, refs []store.TaskRef, msg string, at time.Time) ([]store.TaskRef, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	set, err := lostRefsJSON(refs)
	if err != nil {
		return nil, err
	}
	rows, err := t.tx.QueryContext(ctx, failLostSQL, set, msg, at.UnixMicro())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var failed []store.TaskRef
	for rows.Next() {
		var r store.TaskRef
		if err := rows.Scan(&r.JobID, &r.TaskID); err != nil {
			return nil, err
		}
		failed = append(failed, r)
	}
	return failed, rows.Err()
}

// lostRefsJSON is refs as lostRefsSQL reads them.
func lostRefsJSON(refs []store.TaskRef) (string, error) {
	pairs := make([][2]any, len(refs))
	for i, r := range refs {
		pairs[i] = [2]any{r.JobID, r.TaskID}
	}
	b, err := json.Marshal(pairs)
	return string(b), err
}

// expiringByDefaultSQL selects up to ?2 closed jobs without a retention
// of their own that closed at or before ?1, the first closed first,
// through jobs_expiring_by_default.
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

// retentionReader is engine.RetentionReader on q: the write transaction,
// or a reader connection (Peek).
type retentionReader struct{ q querier }

// Peek implements engine.Driver: the candidates are read on a reader
// connection, so that a sweep with nothing to do never takes the writer.
func (d engineDriver) Peek() engine.RetentionReader { return retentionReader{d.s.r} }

// ExpiringJobs implements engine.RetentionReader.
func (t *tx) ExpiringJobs(ctx context.Context, q engine.ExpiringQuery) ([]engine.ExpiringJob, error) {
	return retentionReader{t.tx}.ExpiringJobs(ctx, q)
}

// DeletedJobs implements engine.RetentionReader.
func (t *tx) DeletedJobs(ctx context.Context, limit int) ([]engine.DeletedJob, error) {
	return retentionReader{t.tx}.DeletedJobs(ctx, limit)
}

// ExpiringJobs implements engine.RetentionReader: one indexed query of
// each kind.
func (r retentionReader) ExpiringJobs(ctx context.Context, q engine.ExpiringQuery) ([]engine.ExpiringJob, error) {
	var jobs []engine.ExpiringJob
	if q.ByDefault {
		byDefault, err := r.expiring(ctx, expiringByDefaultSQL, q.DefaultCutoff, q.Limit)
		if err != nil {
			return nil, err
		}
		jobs = byDefault
	}
	byOwn, err := r.expiring(ctx, expiringByOwnSQL, q.Now, q.Limit)
	if err != nil {
		return nil, err
	}
	return append(jobs, byOwn...), nil
}

// expiring reads the candidates that query (expiringByDefaultSQL or
// expiringByOwnSQL) selects with bound and limit.
func (r retentionReader) expiring(ctx context.Context, query string, bound time.Time, limit int) ([]engine.ExpiringJob, error) {
	rows, err := r.q.QueryContext(ctx, query, bound.UnixMicro(), limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var jobs []engine.ExpiringJob
	for rows.Next() {
		var (
			j                     engine.ExpiringJob
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

// DeletedJobs implements engine.RetentionReader, in rowid order: the
// order they were deleted in.
func (r retentionReader) DeletedJobs(ctx context.Context, limit int) ([]engine.DeletedJob, error) {
	rows, err := r.q.QueryContext(ctx, `SELECT job_id, tasks, purged FROM deleted_jobs ORDER BY rowid LIMIT ?`, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var jobs []engine.DeletedJob
	for rows.Next() {
		var j engine.DeletedJob
		if err := rows.Scan(&j.ID, &j.Tasks, &j.Purged); err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return jobs, rows.Err()
}

// deleteJobsSQL deletes the closed jobs of the JSON array of ids ?1 and
// returns the id and number of tasks of each it deleted.
const deleteJobsSQL = `DELETE FROM jobs
	WHERE id IN (SELECT value FROM json_each(?1)) AND state IN ('completed', 'failed', 'cancelled')
	RETURNING id, expected_tasks`

// recordDeletedSQL records the jobs of the JSON array ?1 of [id, tasks]
// pairs in deleted_jobs, deleted at ?2.
const recordDeletedSQL = `INSERT INTO deleted_jobs (job_id, deleted_at, tasks)
	SELECT value ->> 0, ?2, value ->> 1 FROM json_each(?1)`

// DeleteJobs implements engine.RetentionTx. With foreign keys on,
// deleting a job would delete its tasks too: BeginDelete turns them off.
func (t *tx) DeleteJobs(ctx context.Context, ids []string, at time.Time) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	set, err := json.Marshal(ids)
	if err != nil {
		return 0, err
	}
	rows, err := t.tx.QueryContext(ctx, deleteJobsSQL, string(set))
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
	if _, err := t.tx.ExecContext(ctx, `DELETE FROM job_results WHERE job_id IN (SELECT value ->> 0 FROM json_each(?1))`, string(set)); err != nil {
		return 0, err
	}
	// Foreign keys are off here (BeginDelete): a large result's parts go
	// by name too.
	if _, err := t.tx.ExecContext(ctx, `DELETE FROM job_result_parts WHERE job_id IN (SELECT value ->> 0 FROM json_each(?1))`, string(set)); err != nil {
		return 0, err
	}
	if _, err := t.tx.ExecContext(ctx, `DELETE FROM webhook_deliveries WHERE job_id IN (SELECT value ->> 0 FROM json_each(?1))`, string(set)); err != nil {
		return 0, err
	}
	// The staged spawn parts of runs that never completed.
	if _, err := t.tx.ExecContext(ctx, `DELETE FROM spawn_parts WHERE job_id IN (SELECT value ->> 0 FROM json_each(?1))`, string(set)); err != nil {
		return 0, err
	}
	if _, err := t.tx.ExecContext(ctx, recordDeletedSQL, string(set), at.UnixMicro()); err != nil {
		return 0, err
	}
	return len(deleted), nil
}

// PurgeTasks implements engine.RetentionTx: two statements per range.
func (t *tx) PurgeTasks(ctx context.Context, plan []engine.PurgeRange) (int, error) {
	var purged int64
	for _, r := range plan {
		n, err := t.purgeRange(ctx, r)
		if err != nil {
			return 0, err
		}
		purged += n
	}
	return int(purged), nil
}

// purgeRange deletes the task rows of r and records it: the job's
// progress, or, for its last range, that it is purged. It returns how
// many task rows it deleted.
func (t *tx) purgeRange(ctx context.Context, r engine.PurgeRange) (int64, error) {
	var (
		res sql.Result
		err error
	)
	if r.Last {
		// task_id = 0: the reduce task, which no range counts.
		res, err = t.tx.ExecContext(ctx, `DELETE FROM tasks WHERE job_id = ? AND (task_id > ? OR task_id = 0)`, r.JobID, r.After)
		if err == nil {
			_, err = t.tx.ExecContext(ctx, `DELETE FROM task_attempts WHERE job_id = ? AND (task_id > ? OR task_id = 0)`, r.JobID, r.After)
		}
	} else {
		res, err = t.tx.ExecContext(ctx, `DELETE FROM tasks WHERE job_id = ? AND task_id > ? AND task_id <= ?`, r.JobID, r.After, r.Through)
		if err == nil {
			_, err = t.tx.ExecContext(ctx, `DELETE FROM task_attempts WHERE job_id = ? AND task_id > ? AND task_id <= ?`, r.JobID, r.After, r.Through)
		}
	}
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	if r.Last {
		_, err = t.tx.ExecContext(ctx, `DELETE FROM deleted_jobs WHERE job_id = ?`, r.JobID)
	} else {
		_, err = t.tx.ExecContext(ctx, `UPDATE deleted_jobs SET purged = ? WHERE job_id = ?`, r.Through, r.JobID)
	}
	return n, err
}

// BeginDelete implements engine.Driver: a write transaction, as Begin
// starts, on the writer connection with its foreign keys off, turned on
// again when it ends, before any other write may use the connection. The
// tasks table's foreign key deletes a job's tasks with its row (ON DELETE
// CASCADE), all in one transaction, and deleting a million task rows
// holds the one writer for seconds; with the keys off, a job's row goes
// at once and PurgeDeletedTasks deletes its tasks in batches. The keys
// cannot be switched inside a transaction, hence the connection held
// throughout. A connection whose keys could not be turned on again is
// discarded, and the pool opens a new one, with them on.
func (d engineDriver) BeginDelete(ctx context.Context) (engine.Tx, error) {
	conn, err := d.s.w.Conn(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, `PRAGMA foreign_keys = OFF`); err != nil {
		return nil, errors.Join(err, keysOn(ctx, conn))
	}
	t, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return nil, errors.Join(err, keysOn(ctx, conn))
	}
	return &deleteTx{tx: &tx{tx: t}, conn: conn}, nil
}

// keysOn turns the foreign keys of conn on again and gives it back to the
// pool, or discards it when they could not be.
func keysOn(ctx context.Context, conn *sql.Conn) error {
	_, err := conn.ExecContext(context.WithoutCancel(ctx), `PRAGMA foreign_keys = ON`)
	if err != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		err = fmt.Errorf("turn foreign keys on again: %w", err)
	}
	return errors.Join(err, conn.Close())
}

// deleteTx is a transaction of BeginDelete: its end turns the keys on
// again, once.
type deleteTx struct {
	*tx
	conn *sql.Conn
	once sync.Once
}

// Commit implements engine.Tx.
func (t *deleteTx) Commit(ctx context.Context) error {
	return errors.Join(t.tx.Commit(ctx), t.end(ctx))
}

// Rollback implements engine.Tx.
func (t *deleteTx) Rollback(ctx context.Context) error {
	return errors.Join(t.tx.Rollback(ctx), t.end(ctx))
}

// end turns the keys on again the first time it is called.
func (t *deleteTx) end(ctx context.Context) (err error) {
	t.once.Do(func() { err = keysOn(ctx, t.conn) })
	return err
}
