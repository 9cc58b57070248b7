package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/internal/engine"
)

// LockOutcomeTasks implements engine.OutcomeTx in one pipelined round
// trip. The first statement locks the task rows in (job_id, task_id)
// order, so that concurrent aggregators lock them in one order; the
// second reads their jobs' states with a snapshot taken once those locks
// are held.
func (t *tx) LockOutcomeTasks(ctx context.Context, refs []store.TaskRef) ([]engine.OutcomeTask, map[string]engine.OutcomeJob, error) {
	jobIDs, taskIDs := splitRefs(refs)
	var distinct []string
	seen := make(map[string]bool)
	for _, id := range jobIDs {
		if !seen[id] {
			seen[id] = true
			distinct = append(distinct, id)
		}
	}
	b := &pgx.Batch{}
	// The batch's rows are found by primary key, one index probe each.
	// Told that a batch holds thousands of them, the planner hashes the
	// whole tasks table instead: for 2,000 outcomes against 140,000 rows,
	// a 63 ms scan where the probes take 10 ms, and a scan grows with the
	// table. For this transaction only, it may not.
	b.Queue(`SELECT set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true)`)
	b.Queue(`SELECT job_id, task_id, state, generation, attempts, worker, started_at FROM tasks
		WHERE (job_id, task_id) IN (SELECT * FROM unnest($1::text[], $2::bigint[]))
		ORDER BY job_id, task_id
		FOR UPDATE`, jobIDs, taskIDs)
	b.Queue(`SELECT id, state, reduce_state FROM jobs WHERE id = ANY($1)`, distinct)
	br := t.tx.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, nil, fmt.Errorf("plan: %w", err)
	}
	rows, _ := br.Query() // its error is the rows' too
	tasks, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (engine.OutcomeTask, error) {
		var (
			task  engine.OutcomeTask
			state string
		)
		err := row.Scan(&task.JobID, &task.TaskID, &state, &task.Generation, &task.Attempts, &task.Worker, &task.StartedAt)
		task.State = warren.TaskState(state)
		return task, err
	})
	if err != nil {
		return nil, nil, err
	}
	rows, _ = br.Query()
	jobs := make(map[string]engine.OutcomeJob, len(distinct))
	for rows.Next() {
		var id, state, reduce string
		if err := rows.Scan(&id, &state, &reduce); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("read job states: %w", err)
		}
		jobs[id] = engine.OutcomeJob{State: warren.JobState(state), ReduceState: reduce}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("read job states: %w", err)
	}
	return tasks, jobs, br.Close()
}

// writeOutcomesSQL writes the task rows of its arrays, each if still open
// at its generation, in one set-wise update.
const writeOutcomesSQL = `
	UPDATE tasks t
	SET state = w.state, result = w.result, error = w.error, attempts = w.attempts, worker = w.worker,
	    started_at = w.started_at, finished_at = w.finished_at
	FROM unnest($1::text[], $2::bigint[], $3::integer[], $4::text[], $5::bytea[], $6::text[], $7::integer[],
	            $8::text[], $9::timestamptz[], $10::timestamptz[])
	     AS w(job_id, task_id, generation, state, result, error, attempts, worker, started_at, finished_at)
	WHERE t.job_id = w.job_id AND t.task_id = w.task_id
	  AND t.generation = w.generation AND t.state IN ('pending', 'queued')`

// WriteOutcomes implements engine.OutcomeTx in one pipelined round trip:
// one set-wise update of the task rows, then one update per job row, in
// job id order.
func (t *tx) WriteOutcomes(ctx context.Context, writes []engine.TaskWrite, deltas []engine.CounterDelta, attempts []engine.AttemptWrite) (int, []warren.Job, error) {
	n := len(writes)
	var (
		jobIDs, states, errs, workers = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		taskIDs                       = make([]int64, n)
		results                       = make([][]byte, n)
		generations, runs             = make([]int32, n), make([]int32, n)
		started                       = make([]*time.Time, n)
		finished                      = make([]time.Time, n)
	)
	for i, w := range writes {
		jobIDs[i], taskIDs[i], generations[i] = w.JobID, w.TaskID, int32(w.Generation)
		states[i], results[i], errs[i] = string(w.State), w.Result, w.Error
		runs[i], workers[i], started[i], finished[i] = int32(w.Attempts), w.Worker, w.StartedAt, w.FinishedAt
	}
	b := &pgx.Batch{}
	b.Queue(writeOutcomesSQL, jobIDs, taskIDs, generations, states, results, errs, runs, workers, started, finished)
	deltas = queueBumps(b, deltas)
	prunes := queueAttempts(b, attempts)
	br := t.tx.SendBatch(ctx, b)
	defer br.Close()
	tag, err := br.Exec()
	if err != nil {
		return 0, nil, err
	}
	jobs, err := readBumps(br, deltas, len(attempts) > 0, prunes)
	return int(tag.RowsAffected()), jobs, err
}

// writeAttemptsSQL records the attempt rows of its arrays
// (engine.AttemptWrite) in one set-wise insert: a row already there
// stays unless the new one is of a later generation.
const writeAttemptsSQL = `
	INSERT INTO task_attempts (job_id, task_id, attempt, generation, outcome, worker, started_at, finished_at, error, traceback)
	SELECT * FROM unnest($1::text[], $2::bigint[], $3::integer[], $4::integer[], $5::text[], $6::text[],
	                     $7::timestamptz[], $8::timestamptz[], $9::text[], $10::text[])
	ON CONFLICT (job_id, task_id, attempt) DO UPDATE SET generation = excluded.generation,
		outcome = excluded.outcome, worker = excluded.worker, started_at = excluded.started_at,
		finished_at = excluded.finished_at, error = excluded.error, traceback = excluded.traceback
	WHERE excluded.generation > task_attempts.generation`

// pruneAttemptsSQL deletes, of each task ($1, $2), the attempt rows
// through attempt $3.
const pruneAttemptsSQL = `
	DELETE FROM task_attempts a
	USING unnest($1::text[], $2::bigint[], $3::integer[]) AS p(job_id, task_id, through)
	WHERE a.job_id = p.job_id AND a.task_id = p.task_id AND a.attempt <= p.through`

// queueAttempts queues on b the insert of attempts, when there are any,
// and the prune of the tasks past the attempts the store keeps, when
// there are any, and reports whether it queued a prune.
func queueAttempts(b *pgx.Batch, attempts []engine.AttemptWrite) bool {
	if len(attempts) == 0 {
		return false
	}
	n := len(attempts)
	var (
		jobIDs, outcomes, workers, errs, tracebacks = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		taskIDs                                     = make([]int64, n)
		numbers, generations                        = make([]int32, n), make([]int32, n)
		started                                     = make([]*time.Time, n)
		finished                                    = make([]time.Time, n)
		pruneJobs                                   []string
		pruneTasks                                  []int64
		pruneThrough                                []int32
	)
	for i, a := range attempts {
		jobIDs[i], taskIDs[i], numbers[i], generations[i] = a.JobID, a.TaskID, int32(a.Attempt), int32(a.Generation)
		outcomes[i], workers[i], started[i], finished[i] = string(a.Outcome), a.Worker, a.StartedAt, a.FinishedAt
		errs[i], tracebacks[i] = a.Error, a.Traceback
		if a.PruneThrough > 0 {
			pruneJobs, pruneTasks, pruneThrough = append(pruneJobs, a.JobID), append(pruneTasks, a.TaskID), append(pruneThrough, int32(a.PruneThrough))
		}
	}
	b.Queue(writeAttemptsSQL, jobIDs, taskIDs, numbers, generations, outcomes, workers, started, finished, errs, tracebacks)
	if len(pruneJobs) == 0 {
		return false
	}
	b.Queue(pruneAttemptsSQL, pruneJobs, pruneTasks, pruneThrough)
	return true
}

// BumpCounters implements engine.OutcomeTx in one pipelined round trip.
func (t *tx) BumpCounters(ctx context.Context, deltas []engine.CounterDelta) ([]warren.Job, error) {
	if len(deltas) == 0 {
		return nil, nil
	}
	b := &pgx.Batch{}
	deltas = queueBumps(b, deltas)
	br := t.tx.SendBatch(ctx, b)
	defer br.Close()
	return readBumps(br, deltas, false, false)
}

// queueBumps queues the counter update of each job of deltas on b, in
// job id order, the lock order of job rows, and returns deltas in that
// order. LEAST and GREATEST ignore NULLs: a delta without a start leaves
// started_at, and the first start sets it (last_finished_at likewise).
func queueBumps(b *pgx.Batch, deltas []engine.CounterDelta) []engine.CounterDelta {
	deltas = slices.SortedFunc(slices.Values(deltas), func(a, b engine.CounterDelta) int { return cmp.Compare(a.JobID, b.JobID) })
	for _, d := range deltas {
		b.Queue(`
			UPDATE jobs SET completed_tasks = completed_tasks + $2, failed_tasks = failed_tasks + $3,
				expected_tasks = expected_tasks + $5, spawned_tasks = spawned_tasks + $5,
				version = version + 1, reduce_state = CASE WHEN $4 = '' THEN reduce_state ELSE $4 END,
				started_at = LEAST(started_at, $6::timestamptz), last_finished_at = GREATEST(last_finished_at, $7::timestamptz)
			WHERE id = $1
			RETURNING `+jobColumns,
			d.JobID, d.Completed, d.Failed, d.ReduceState, d.Expected, d.Started, d.Finished)
	}
	return deltas
}

// readBumps reads the job rows of the counter updates queueBumps queued
// for deltas, then the results of the attempt insert and its prune when
// they were queued after them (queueAttempts), and closes br.
func readBumps(br pgx.BatchResults, deltas []engine.CounterDelta, attempts, prune bool) ([]warren.Job, error) {
	jobs := make([]warren.Job, 0, len(deltas))
	for _, d := range deltas {
		job, err := scanJob(br.QueryRow())
		if err != nil {
			return nil, fmt.Errorf("count results of job %q: %w", d.JobID, err)
		}
		jobs = append(jobs, job)
	}
	for _, queued := range []bool{attempts, prune} {
		if !queued {
			continue
		}
		if _, err := br.Exec(); err != nil {
			return nil, fmt.Errorf("record attempts: %w", err)
		}
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("count results: %w", err)
	}
	return jobs, nil
}

var _ engine.CloseCandidateReader = engineDriver{}

// CloseCandidates implements engine.CloseCandidateReader on the pool, in
// id order through jobs_open_idx (ids are ULIDs: creation order). The
// cursor is the last job's id.
func (d engineDriver) CloseCandidates(ctx context.Context, after string, limit int) ([]warren.Job, string, error) {
	rows, err := d.s.pool.Query(ctx, `
		SELECT `+jobColumns+` FROM jobs
		WHERE state IN ('pending', 'running') AND id > $1
		  AND (reduce_state IN ('completed', 'failed') OR (reduce_state = ''
		       AND (completed_tasks + failed_tasks >= expected_tasks OR (fail_fast AND failed_tasks > 0))))
		ORDER BY id
		LIMIT $2`, after, limit)
	if err != nil {
		return nil, "", err
	}
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (warren.Job, error) { return scanJob(row) })
	if err != nil {
		return nil, "", err
	}
	next := after
	if len(jobs) > 0 {
		next = jobs[len(jobs)-1].ID
	}
	return jobs, next, nil
}
