package postgres

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// verdict is what became of one outcome.
type verdict int

const (
	verdictApplied verdict = iota
	verdictDuplicate
	verdictClosed
	verdictUnknown
)

// judge classifies an outcome from whether it changed its task and the
// job's and task's states (nil when missing). An outcome that changed
// nothing although its task and job are open is of another generation
// than the task's, or came after another outcome of its task in the same
// batch: a duplicate either way.
func judge(applied bool, jobState, taskState *string) verdict {
	switch {
	case applied:
		return verdictApplied
	case jobState == nil || taskState == nil:
		return verdictUnknown
	case warren.JobState(*jobState).Terminal():
		return verdictClosed
	}
	return verdictDuplicate
}

// counts is how many tasks of one job a batch moved to each terminal state.
type counts struct{ completed, failed int64 }

// ApplyOutcomes records a batch of outcomes in one transaction. The task
// rows are locked in (job_id, task_id) order, so concurrent aggregators
// lock them in one order, then updated by one set-wise guarded update
// (applyTasks), all in one round trip. Each job's counters then move by
// the number of its task rows that changed, job by job in id order, and the
// updated counters decide which jobs this batch made ready to close
// (store.BecameReady).
func (s *Store) ApplyOutcomes(ctx context.Context, outcomes []store.Outcome) (store.ApplyReport, error) {
	var report store.ApplyReport
	if err := store.ValidateOutcomes(outcomes); err != nil {
		return store.ApplyReport{}, fmt.Errorf("postgres: apply outcomes: %w", err)
	}
	if len(outcomes) == 0 {
		return report, nil
	}
	outcomes = store.SanitizeOutcomes(outcomes)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return report, fmt.Errorf("postgres: apply outcomes: %w", err)
	}
	defer rollback(ctx, tx)

	verdicts, err := s.applyTasks(ctx, tx, outcomes)
	if err != nil {
		return report, err
	}
	deltas := make(map[string]*counts)
	for i, v := range verdicts {
		switch v {
		case verdictApplied:
			report.Applied++
			d := deltas[outcomes[i].JobID]
			if d == nil {
				d = &counts{}
				deltas[outcomes[i].JobID] = d
			}
			if outcomes[i].State == warren.TaskCompleted {
				d.completed++
			} else {
				d.failed++
				report.AppliedFailed++
			}
		case verdictDuplicate:
			report.Duplicates++
		case verdictClosed:
			report.Closed++
		case verdictUnknown:
			report.Unknown = append(report.Unknown, i)
		}
	}

	if report.ReadyToClose, err = bumpCounters(ctx, tx, deltas); err != nil {
		return store.ApplyReport{}, fmt.Errorf("postgres: apply outcomes: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return store.ApplyReport{}, fmt.Errorf("postgres: apply outcomes: commit: %w", err)
	}
	return report, nil
}

// applyTasks records the outcomes' task rows set-wise, in one pipelined
// round trip of three statements, and returns each outcome's verdict by
// its index. The first statement locks the task rows in (job_id, task_id)
// order, so that concurrent aggregators never deadlock; the second, with a
// snapshot taken once those locks are held, applies the guarded transition
// to every row at once (the job's state is read, not locked, which is safe
// because closing a job cancels, and so locks, every task that is not
// finished); the third reads the job's and task's states of every outcome,
// to classify those that changed nothing. Of several outcomes of one task
// in a batch, the first whose generation the task accepts (its own, or 0)
// counts: the others are duplicates (or closed or unknown, as the first).
// An outcome without attempts (0, unknown) keeps the stored count, but at
// least 1: the task ran to produce it. One without a worker ("", unknown)
// keeps the stored worker.
func (s *Store) applyTasks(ctx context.Context, tx pgx.Tx, outcomes []store.Outcome) ([]verdict, error) {
	now := s.clock()
	n := len(outcomes)
	var (
		jobIDs, states, errs, workers = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		taskIDs                       = make([]int64, n)
		results                       = make([][]byte, n)
		attempts, generations         = make([]int32, n), make([]int32, n)
		started                       = make([]*time.Time, n)
		finished                      = make([]time.Time, n)
	)
	for i, o := range outcomes {
		finished[i] = now
		if o.FinishedAt != nil {
			finished[i] = o.FinishedAt.UTC()
		}
		if len(o.Result) > 0 {
			results[i] = []byte(o.Result)
		}
		jobIDs[i], taskIDs[i], states[i] = o.JobID, o.TaskID, string(o.State)
		errs[i], attempts[i], generations[i] = o.Error, int32(o.Attempts), int32(o.Generation)
		workers[i], started[i] = o.Worker, o.StartedAt
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT 1 FROM tasks
		WHERE (job_id, task_id) IN (SELECT * FROM unnest($1::text[], $2::bigint[]))
		ORDER BY job_id, task_id
		FOR UPDATE`, jobIDs, taskIDs)
	// i picks, for each task, the first outcome (by its position n) whose
	// generation the task accepts; the update then applies it if the task
	// and its job are open.
	b.Queue(`
		UPDATE tasks t
		SET state = i.state, result = i.result, error = i.error,
		    attempts = CASE WHEN i.attempts > 0 THEN i.attempts ELSE GREATEST(t.attempts, 1) END,
		    worker = CASE WHEN i.worker <> '' THEN i.worker ELSE t.worker END,
		    started_at = COALESCE(i.started_at, t.started_at),
		    finished_at = i.finished_at
		FROM (
		    SELECT DISTINCT ON (o.job_id, o.task_id) o.*
		    FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bytea[], $5::text[], $6::integer[], $7::text[],
		                $8::timestamptz[], $9::timestamptz[], $10::integer[]) WITH ORDINALITY
		         AS o(job_id, task_id, state, result, error, attempts, worker, started_at, finished_at, generation, n)
		    JOIN tasks c ON c.job_id = o.job_id AND c.task_id = o.task_id
		    WHERE o.generation = 0 OR o.generation = c.generation
		    ORDER BY o.job_id, o.task_id, o.n
		) AS i, jobs j
		WHERE t.job_id = i.job_id AND t.task_id = i.task_id
		  AND j.id = t.job_id AND j.state IN ('pending', 'running')
		  AND t.state NOT IN ('completed', 'failed', 'cancelled')
		RETURNING i.n`,
		jobIDs, taskIDs, states, results, errs, attempts, workers, started, finished, generations)
	b.Queue(`
		SELECT i.n, j.state, t.state
		FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS i(job_id, task_id, n)
		LEFT JOIN jobs j ON j.id = i.job_id
		LEFT JOIN tasks t ON t.job_id = i.job_id AND t.task_id = i.task_id`, jobIDs, taskIDs)
	br := tx.SendBatch(ctx, b)
	fail := func(err error) ([]verdict, error) {
		_ = br.Close()
		return nil, fmt.Errorf("postgres: apply outcomes: %w", err)
	}
	if _, err := br.Exec(); err != nil {
		return fail(err)
	}
	applied := make([]bool, n)
	rows, err := br.Query()
	if err != nil {
		return fail(err)
	}
	for rows.Next() {
		var k int64
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return fail(err)
		}
		applied[k-1] = true
	}
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	rows, err = br.Query()
	if err != nil {
		return fail(err)
	}
	verdicts := make([]verdict, n)
	for rows.Next() {
		var (
			k                   int64
			jobState, taskState *string
		)
		if err := rows.Scan(&k, &jobState, &taskState); err != nil {
			rows.Close()
			return fail(err)
		}
		verdicts[k-1] = judge(applied[k-1], jobState, taskState)
	}
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("postgres: apply outcomes: %w", err)
	}
	return verdicts, nil
}

// bumpCounters adds each job's deltas to its counters, in job id order, in
// one pipelined batch, and returns the jobs the new counts made ready to
// close (store.BecameReady).
func bumpCounters(ctx context.Context, tx pgx.Tx, deltas map[string]*counts) ([]string, error) {
	if len(deltas) == 0 {
		return nil, nil
	}
	ids := slices.Sorted(maps.Keys(deltas))
	b := &pgx.Batch{}
	for _, id := range ids {
		b.Queue(`
			UPDATE jobs SET completed_tasks = completed_tasks + $2, failed_tasks = failed_tasks + $3,
				version = version + 1
			WHERE id = $1
			RETURNING `+jobColumns,
			id, deltas[id].completed, deltas[id].failed)
	}
	var ready []string
	br := tx.SendBatch(ctx, b)
	for _, id := range ids {
		job, err := scanJob(br.QueryRow())
		if err != nil {
			_ = br.Close()
			return nil, fmt.Errorf("count results of job %q: %w", id, err)
		}
		if d := deltas[id]; store.BecameReady(job, d.completed, d.failed) {
			ready = append(ready, id)
		}
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("count results: %w", err)
	}
	return ready, nil
}

// JobsToClose returns up to limit ids of open jobs that are ready to close
// (store.ReadyToClose), oldest first. limit <= 0 means
// store.DefaultPageSize.
//
// The SQL only narrows to candidates (finished, or failing fast with a
// failure) and store.ReadyToClose decides, so the tolerance arithmetic is
// never written in SQL. Candidates are read in pages of limit, in id order
// through jobs_open_idx, until limit of them are ready or none is left: a
// fail-fast job within its tolerance is a candidate that is not ready, and
// must not take the place of one that is.
func (s *Store) JobsToClose(ctx context.Context, limit int) ([]string, error) {
	limit = store.PageSize(limit)
	var ids []string
	after := ""
	for len(ids) < limit {
		rows, err := s.pool.Query(ctx, `
			SELECT `+jobColumns+` FROM jobs
			WHERE state IN ('pending', 'running') AND id > $1
			  AND (completed_tasks + failed_tasks >= expected_tasks OR (fail_fast AND failed_tasks > 0))
			ORDER BY id
			LIMIT $2`, after, limit)
		if err != nil {
			return nil, fmt.Errorf("postgres: jobs to close: %w", err)
		}
		candidates, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (warren.Job, error) { return scanJob(row) })
		if err != nil {
			return nil, fmt.Errorf("postgres: jobs to close: %w", err)
		}
		for _, j := range candidates {
			if len(ids) < limit && store.ReadyToClose(j) {
				ids = append(ids, j.ID)
			}
		}
		if len(candidates) < limit {
			break
		}
		after = candidates[len(candidates)-1].ID
	}
	return ids, nil
}
