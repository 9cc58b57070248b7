package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// staleSQL selects up to ?3 queued tasks of open jobs that are stale
// (store.Staleness): max(queued_at, ?4) is more than their job's task
// timeout before ?1, the cutoff (Staleness.Cutoff); ?2 is the default
// timeout in milliseconds, ?4 the busy time. Oldest publish first.
//
// The first queued_at bound, with the shortest timeout of any open job,
// is what lets tasks_queued read only the tasks queued before it; it is
// NULL, so that nothing is read, while the busy time keeps every task
// from being stale (a backlog keeps the queues busy, and the tasks behind
// it need not be walked at every pass). The last condition applies each
// task's own job's timeout. CROSS JOIN makes SQLite walk the tasks first,
// so nothing is sorted.
const staleSQL = `SELECT t.job_id, t.task_id, t.attempts, j.max_retries
	FROM tasks AS t INDEXED BY tasks_queued CROSS JOIN jobs AS j
	WHERE t.state = 'queued'
	  AND t.queued_at < (SELECT CASE WHEN ?4 < bound THEN bound END
	      FROM (SELECT ?1 - 1000 * MIN(CASE WHEN task_timeout_ms > 0 THEN task_timeout_ms ELSE ?2 END) AS bound
	            FROM jobs WHERE state IN ('pending', 'running')))
	  AND j.id = t.job_id AND j.state IN ('pending', 'running')
	  AND max(t.queued_at, ?4) < ?1 - 1000 * CASE WHEN j.task_timeout_ms > 0 THEN j.task_timeout_ms ELSE ?2 END
	ORDER BY t.queued_at
	LIMIT ?3`

// ReconcileStale handles, in one write transaction, up to limit queued
// tasks of open jobs that are stale at at (store.Staleness: neither their
// last publish nor at.Busy is within their job's task timeout, see
// warren.Policy.EffectiveTaskTimeout, plus at.Grace before at.Now),
// oldest publish first. staleSQL selects them; store.SplitLost decides
// which go back to pending and which fail as lost; two guarded updates
// apply the two sets, each with attempts+1 (the failed ones with
// finished_at at.Now and store.LostError), and the failed ones move their
// jobs' failed counters as ApplyOutcomes would. ReadyToClose lists, once
// each and in id order, the jobs this made ready to close
// (store.BecameReady). Write transactions are serialised, so concurrent
// calls never handle a task twice. limit <= 0 means
// store.DefaultPageSize.
func (s *Store) ReconcileStale(ctx context.Context, at store.Staleness, limit int) (store.ReconcileReport, error) {
	var report store.ReconcileReport
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		report = store.ReconcileReport{}
		tasks, err := staleTasks(ctx, tx, at, store.PageSize(limit))
		if err != nil {
			return err
		}
		requeue, fail := store.SplitLost(tasks)
		requeued, err := requeueLost(ctx, tx, requeue)
		if err != nil {
			return err
		}
		failed, err := failLost(ctx, tx, fail, at.Now)
		if err != nil {
			return err
		}
		report.Requeued = requeued
		for _, d := range failed {
			report.Failed += int(d.failed)
		}
		report.ReadyToClose, err = bumpCounters(ctx, tx, failed)
		return err
	})
	if err != nil {
		return store.ReconcileReport{}, fmt.Errorf("sqlite: reconcile stale tasks: %w", err)
	}
	return report, nil
}

// staleTasks reads the stale tasks staleSQL selects.
func staleTasks(ctx context.Context, tx *sql.Tx, at store.Staleness, limit int) ([]store.StaleTask, error) {
	rows, err := tx.QueryContext(ctx, staleSQL, at.Cutoff().UnixMicro(), warren.DefaultTaskTimeout.Milliseconds(), limit, at.Busy.UnixMicro())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var tasks []store.StaleTask
	for rows.Next() {
		var t store.StaleTask
		if err := rows.Scan(&t.JobID, &t.TaskID, &t.Attempts, &t.MaxRetries); err != nil {
			return nil, err
		}
		tasks = append(tasks, t)
	}
	return tasks, rows.Err()
}

// refsSQL is the set of tasks named by the JSON array of [job_id, task_id]
// pairs in parameter ?1, so that one statement of one parameter updates a
// set of any size.
const refsSQL = `(SELECT value ->> 0 AS job_id, value ->> 1 AS task_id FROM json_each(?1))`

// requeueLostSQL sends the tasks of the set ?1 (refsSQL) that are still
// queued back to pending with attempts+1, at their next generation.
const requeueLostSQL = `UPDATE tasks SET state = 'pending', attempts = attempts + 1, generation = generation + 1
	FROM ` + refsSQL + ` AS r
	WHERE tasks.job_id = r.job_id AND tasks.task_id = r.task_id AND tasks.state = 'queued'`

// failLostSQL fails the tasks of the set ?1 (refsSQL) that are still
// queued with the error ?2, finished_at ?3 and attempts+1, and returns
// their job ids.
const failLostSQL = `UPDATE tasks SET state = 'failed', attempts = attempts + 1, error = ?2, finished_at = ?3
	FROM ` + refsSQL + ` AS r
	WHERE tasks.job_id = r.job_id AND tasks.task_id = r.task_id AND tasks.state = 'queued'
	RETURNING tasks.job_id`

// refsJSON is refs as refsSQL reads them.
func refsJSON(refs []store.TaskRef) (string, error) {
	pairs := make([][2]any, len(refs))
	for i, r := range refs {
		pairs[i] = [2]any{r.JobID, r.TaskID}
	}
	b, err := json.Marshal(pairs)
	return string(b), err
}

// requeueLost applies requeueLostSQL to refs and returns how many tasks it
// moved.
func requeueLost(ctx context.Context, tx *sql.Tx, refs []store.TaskRef) (int, error) {
	if len(refs) == 0 {
		return 0, nil
	}
	set, err := refsJSON(refs)
	if err != nil {
		return 0, err
	}
	res, err := tx.ExecContext(ctx, requeueLostSQL, set)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// failLost applies failLostSQL to refs, failing them as lost at at, and
// returns how many tasks it failed of each job, in job id order.
func failLost(ctx context.Context, tx *sql.Tx, refs []store.TaskRef, at time.Time) ([]jobCounts, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	set, err := refsJSON(refs)
	if err != nil {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx, failLostSQL, set, store.LostError, at.UnixMicro())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	failed := make(map[string]int64)
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		failed[id]++
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	deltas := make([]jobCounts, 0, len(failed))
	for _, id := range slices.Sorted(maps.Keys(failed)) {
		deltas = append(deltas, jobCounts{id: id, counts: counts{failed: failed[id]}})
	}
	return deltas, nil
}
