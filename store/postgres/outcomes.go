package postgres

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
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
	// verdictRecheck means an open task of an open job did not change;
	// applyTasks, which locks the rows before it updates them, never
	// leaves it so.
	verdictRecheck
)

// judge classifies an outcome from whether its task changed and the job's
// and task's states (nil when missing).
func judge(changed bool, jobState, taskState *string) verdict {
	switch {
	case changed:
		return verdictApplied
	case jobState == nil || taskState == nil:
		return verdictUnknown
	case warren.JobState(*jobState).Terminal():
		return verdictClosed
	case warren.TaskState(*taskState).Terminal():
		return verdictDuplicate
	}
	return verdictRecheck
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
	order := make([]int, len(outcomes))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Or(strings.Compare(outcomes[a].JobID, outcomes[b].JobID), cmp.Compare(outcomes[a].TaskID, outcomes[b].TaskID))
	})

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return report, fmt.Errorf("postgres: apply outcomes: %w", err)
	}
	defer rollback(ctx, tx)

	verdicts, err := s.applyTasks(ctx, tx, outcomes, order)
	if err != nil {
		return report, err
	}
	deltas := make(map[string]*counts)
	for _, i := range order {
		switch verdicts[i] {
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
	slices.Sort(report.Unknown)

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
// in a batch, the first counts: the others are duplicates (or closed or
// unknown, as the first). An outcome without attempts (0, unknown) keeps
// the stored count, but at least 1: the task ran to produce it. One
// without a worker ("", unknown) keeps the stored worker.
func (s *Store) applyTasks(ctx context.Context, tx pgx.Tx, outcomes []store.Outcome, order []int) ([]verdict, error) {
	now := s.clock()
	verdicts := make([]verdict, len(outcomes))
	firstOf := make(map[store.TaskRef]int, len(outcomes)) // task -> the outcome that counts
	var (
		jobIDs, states, errs, workers []string
		taskIDs                       []int64
		results                       [][]byte
		attempts                      []int32
		started                       []*time.Time
		finished                      []time.Time
	)
	for _, i := range order {
		o := outcomes[i]
		ref := store.TaskRef{JobID: o.JobID, TaskID: o.TaskID}
		if _, dup := firstOf[ref]; dup {
			continue
		}
		firstOf[ref] = i
		finishedAt := now
		if o.FinishedAt != nil {
			finishedAt = o.FinishedAt.UTC()
		}
		var result []byte
		if len(o.Result) > 0 {
			result = []byte(o.Result)
		}
		jobIDs, taskIDs, states = append(jobIDs, o.JobID), append(taskIDs, o.TaskID), append(states, string(o.State))
		results, errs, attempts = append(results, result), append(errs, o.Error), append(attempts, int32(o.Attempts))
		workers, started, finished = append(workers, o.Worker), append(started, o.StartedAt), append(finished, finishedAt)
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT 1 FROM tasks
		WHERE (job_id, task_id) IN (SELECT * FROM unnest($1::text[], $2::bigint[]))
		ORDER BY job_id, task_id
		FOR UPDATE`, jobIDs, taskIDs)
	b.Queue(`
		UPDATE tasks t
		SET state = i.state, result = i.result, error = i.error,
		    attempts = CASE WHEN i.attempts > 0 THEN i.attempts ELSE GREATEST(t.attempts, 1) END,
		    worker = CASE WHEN i.worker <> '' THEN i.worker ELSE t.worker END,
		    started_at = COALESCE(i.started_at, t.started_at),
		    finished_at = i.finished_at
		FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bytea[], $5::text[], $6::integer[], $7::text[],
		            $8::timestamptz[], $9::timestamptz[])
		     AS i(job_id, task_id, state, result, error, attempts, worker, started_at, finished_at),
		     jobs j
		WHERE t.job_id = i.job_id AND t.task_id = i.task_id
		  AND j.id = t.job_id AND j.state IN ('pending', 'running')
		  AND t.state NOT IN ('completed', 'failed', 'cancelled')
		RETURNING t.job_id, t.task_id`,
		jobIDs, taskIDs, states, results, errs, attempts, workers, started, finished)
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
	changed := make(map[store.TaskRef]bool, len(jobIDs))
	rows, err := br.Query()
	if err != nil {
		return fail(err)
	}
	for rows.Next() {
		var ref store.TaskRef
		if err := rows.Scan(&ref.JobID, &ref.TaskID); err != nil {
			rows.Close()
			return fail(err)
		}
		changed[ref] = true
	}
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	rows, err = br.Query()
	if err != nil {
		return fail(err)
	}
	for rows.Next() {
		var (
			k                   int64
			jobState, taskState *string
		)
		if err := rows.Scan(&k, &jobState, &taskState); err != nil {
			rows.Close()
			return fail(err)
		}
		ref := store.TaskRef{JobID: jobIDs[k-1], TaskID: taskIDs[k-1]}
		v := judge(changed[ref], jobState, taskState)
		if v == verdictRecheck {
			// Open job, open task, yet unchanged although its row was
			// locked first: cannot happen; count it as a duplicate rather
			// than twice.
			v = verdictDuplicate
		}
		verdicts[firstOf[ref]] = v
	}
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("postgres: apply outcomes: %w", err)
	}
	// The other outcomes of a task: what the first was, never counted twice.
	for i, o := range outcomes {
		if first := firstOf[store.TaskRef{JobID: o.JobID, TaskID: o.TaskID}]; first != i {
			verdicts[i] = verdicts[first]
			if verdicts[i] == verdictApplied {
				verdicts[i] = verdictDuplicate
			}
		}
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
