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

// counts is how many tasks of one job a batch moved to each terminal state.
type counts struct{ completed, failed int64 }

// lockedTask is a task row as the batch found it once locked.
type lockedTask struct {
	state      warren.TaskState
	generation int
}

// ApplyOutcomes records a batch of outcomes in one transaction, in two
// round trips between BEGIN and COMMIT, whatever the batch's size.
//
// The first locks the batch's task rows in (job_id, task_id) order, so
// that concurrent aggregators lock them in one order, and reads their
// states and generations; then, in a second statement whose snapshot is
// taken once those locks are held, it reads their jobs' states (read, not
// locked, which is safe because closing a job cancels, and so locks, every
// task that is not finished). judgeOutcomes decides every outcome from
// these rows, which no one else can change until the commit. The second
// round trip applies the guarded transition to the rows it chose, in one
// set-wise update, and moves each job's counters by the number of its
// rows that changed, job by job in id order; the updated counters decide
// which jobs this batch made ready to close (store.BecameReady).
func (s *Store) ApplyOutcomes(ctx context.Context, outcomes []store.Outcome) (store.ApplyReport, error) {
	if err := store.ValidateOutcomes(outcomes); err != nil {
		return store.ApplyReport{}, fmt.Errorf("postgres: apply outcomes: %w", err)
	}
	if len(outcomes) == 0 {
		return store.ApplyReport{}, nil
	}
	outcomes = store.SanitizeOutcomes(outcomes)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return store.ApplyReport{}, fmt.Errorf("postgres: apply outcomes: %w", err)
	}
	defer rollback(ctx, tx)

	tasks, jobs, err := lockOutcomeTasks(ctx, tx, outcomes)
	if err != nil {
		return store.ApplyReport{}, fmt.Errorf("postgres: apply outcomes: %w", err)
	}
	report, applied, deltas := judgeOutcomes(outcomes, tasks, jobs)
	if report.ReadyToClose, err = s.writeOutcomes(ctx, tx, outcomes, applied, deltas); err != nil {
		return store.ApplyReport{}, fmt.Errorf("postgres: apply outcomes: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return store.ApplyReport{}, fmt.Errorf("postgres: apply outcomes: commit: %w", err)
	}
	return report, nil
}

// lockOutcomeTasks locks the outcomes' task rows in (job_id, task_id)
// order and returns them by ref, with the states of their jobs by id, in
// one pipelined round trip. A task or job that does not exist is absent.
func lockOutcomeTasks(ctx context.Context, tx pgx.Tx, outcomes []store.Outcome) (map[store.TaskRef]*lockedTask, map[string]warren.JobState, error) {
	jobIDs, taskIDs := make([]string, len(outcomes)), make([]int64, len(outcomes))
	var distinct []string
	seen := make(map[string]bool)
	for i, o := range outcomes {
		jobIDs[i], taskIDs[i] = o.JobID, o.TaskID
		if !seen[o.JobID] {
			seen[o.JobID] = true
			distinct = append(distinct, o.JobID)
		}
	}
	b := &pgx.Batch{}
	// The batch's rows are found by primary key, one index probe each.
	// Told that a batch holds thousands of them, the planner hashes the
	// whole tasks table instead: for 2,000 outcomes against 140,000 rows,
	// a 63 ms scan where the probes take 10 ms, and a scan grows with the
	// table. For this transaction only, it may not.
	b.Queue(`SELECT set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true)`)
	b.Queue(`SELECT job_id, task_id, state, generation FROM tasks
		WHERE (job_id, task_id) IN (SELECT * FROM unnest($1::text[], $2::bigint[]))
		ORDER BY job_id, task_id
		FOR UPDATE`, jobIDs, taskIDs)
	b.Queue(`SELECT id, state FROM jobs WHERE id = ANY($1)`, distinct)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, nil, fmt.Errorf("plan: %w", err)
	}
	rows, _ := br.Query() // its error is the rows' too
	tasks := make(map[store.TaskRef]*lockedTask, len(outcomes))
	for rows.Next() {
		var (
			ref   store.TaskRef
			state string
			t     lockedTask
		)
		if err := rows.Scan(&ref.JobID, &ref.TaskID, &state, &t.generation); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("lock tasks: %w", err)
		}
		t.state = warren.TaskState(state)
		tasks[ref] = &t
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("lock tasks: %w", err)
	}
	rows, _ = br.Query()
	jobs := make(map[string]warren.JobState, len(distinct))
	for rows.Next() {
		var id, state string
		if err := rows.Scan(&id, &state); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("read job states: %w", err)
		}
		jobs[id] = warren.JobState(state)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("read job states: %w", err)
	}
	return tasks, jobs, br.Close()
}

// judgeOutcomes decides each outcome in batch order from its locked task
// row and its job's state: Unknown when either is missing, Closed when the
// job is, Duplicate when the task is already terminal (also by an earlier
// outcome of this batch) or the outcome's generation is neither the
// task's nor 0, else Applied. It returns the report without ReadyToClose,
// the indexes of the applied outcomes, and each job's counts.
func judgeOutcomes(outcomes []store.Outcome, tasks map[store.TaskRef]*lockedTask, jobs map[string]warren.JobState) (store.ApplyReport, []int, map[string]*counts) {
	var (
		report  store.ApplyReport
		applied []int
		deltas  = make(map[string]*counts)
	)
	for i, o := range outcomes {
		jobState, jobFound := jobs[o.JobID]
		task := tasks[store.TaskRef{JobID: o.JobID, TaskID: o.TaskID}]
		switch {
		case !jobFound || task == nil:
			report.Unknown = append(report.Unknown, i)
		case jobState.Terminal():
			report.Closed++
		case task.state.Terminal() || (o.Generation != 0 && o.Generation != task.generation):
			report.Duplicates++
		default:
			task.state = o.State
			applied = append(applied, i)
			report.Applied++
			d := deltas[o.JobID]
			if d == nil {
				d = &counts{}
				deltas[o.JobID] = d
			}
			if o.State == warren.TaskCompleted {
				d.completed++
			} else {
				d.failed++
				report.AppliedFailed++
			}
		}
	}
	return report, applied, deltas
}

// writeOutcomes applies the applied outcomes to their task rows in one
// set-wise guarded update and adds each job's deltas to its counters, in
// job id order, all in one pipelined round trip, and returns the jobs the
// new counts made ready to close (store.BecameReady). The rows are locked
// and were judged open, so the guard (open, of the outcome's generation or
// it 0) holds for every one of them: a row it skips fails the batch.
//
// An outcome without attempts (0, unknown) keeps the stored count, but at
// least 1: the task ran to produce it. One without a worker ("",
// unknown) keeps the stored worker.
func (s *Store) writeOutcomes(ctx context.Context, tx pgx.Tx, outcomes []store.Outcome, applied []int, deltas map[string]*counts) ([]string, error) {
	if len(applied) == 0 {
		return nil, nil
	}
	now := s.clock()
	n := len(applied)
	var (
		jobIDs, states, errs, workers = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		taskIDs                       = make([]int64, n)
		results                       = make([][]byte, n)
		attempts, generations         = make([]int32, n), make([]int32, n)
		started                       = make([]*time.Time, n)
		finished                      = make([]time.Time, n)
	)
	for k, i := range applied {
		o := outcomes[i]
		finished[k] = now
		if o.FinishedAt != nil {
			finished[k] = o.FinishedAt.UTC()
		}
		if len(o.Result) > 0 {
			results[k] = []byte(o.Result)
		}
		jobIDs[k], taskIDs[k], states[k] = o.JobID, o.TaskID, string(o.State)
		errs[k], attempts[k], generations[k] = o.Error, int32(o.Attempts), int32(o.Generation)
		workers[k], started[k] = o.Worker, o.StartedAt
	}
	b := &pgx.Batch{}
	b.Queue(`
		UPDATE tasks t
		SET state = o.state, result = o.result, error = o.error,
		    attempts = CASE WHEN o.attempts > 0 THEN o.attempts ELSE GREATEST(t.attempts, 1) END,
		    worker = CASE WHEN o.worker <> '' THEN o.worker ELSE t.worker END,
		    started_at = COALESCE(o.started_at, t.started_at),
		    finished_at = o.finished_at
		FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bytea[], $5::text[], $6::integer[], $7::text[],
		            $8::timestamptz[], $9::timestamptz[], $10::integer[])
		     AS o(job_id, task_id, state, result, error, attempts, worker, started_at, finished_at, generation)
		WHERE t.job_id = o.job_id AND t.task_id = o.task_id
		  AND t.state IN ('pending', 'queued')
		  AND (o.generation = 0 OR o.generation = t.generation)`,
		jobIDs, taskIDs, states, results, errs, attempts, workers, started, finished, generations)
	ids := queueBumps(b, deltas)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	tag, err := br.Exec()
	if err != nil {
		return nil, fmt.Errorf("record tasks: %w", err)
	}
	if got := tag.RowsAffected(); got != int64(n) {
		return nil, fmt.Errorf("record tasks: %d of %d locked task rows changed", got, n)
	}
	return readBumps(br, ids, deltas)
}

// queueBumps queues the counter update of each job of deltas on b, in job
// id order, and returns the ids in that order.
func queueBumps(b *pgx.Batch, deltas map[string]*counts) []string {
	ids := slices.Sorted(maps.Keys(deltas))
	for _, id := range ids {
		b.Queue(`
			UPDATE jobs SET completed_tasks = completed_tasks + $2, failed_tasks = failed_tasks + $3,
				version = version + 1
			WHERE id = $1
			RETURNING `+jobColumns,
			id, deltas[id].completed, deltas[id].failed)
	}
	return ids
}

// readBumps reads the results of the counter updates queueBumps queued for
// ids, closes br, and returns the jobs the new counts made ready to close.
func readBumps(br pgx.BatchResults, ids []string, deltas map[string]*counts) ([]string, error) {
	var ready []string
	for _, id := range ids {
		job, err := scanJob(br.QueryRow())
		if err != nil {
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
