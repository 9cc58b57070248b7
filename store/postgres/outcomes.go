package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// applyOutcomeSQL records one outcome with a guarded transition and reports,
// from the same statement, what it found when the guard held it back. The
// task row is the only row it locks; the job's state is read, not locked,
// which is safe because closing a job cancels (and so locks) every task
// that is not finished.
const applyOutcomeSQL = `
	WITH changed AS (
		UPDATE tasks t
		SET state = $3, result = $4, error = $5,
		    attempts = CASE WHEN $6::integer > 0 THEN $6::integer ELSE t.attempts END,
		    worker = CASE WHEN $7::text <> '' THEN $7::text ELSE t.worker END,
		    started_at = COALESCE($8::timestamptz, t.started_at),
		    finished_at = $9
		FROM jobs j
		WHERE t.job_id = $1 AND t.task_id = $2
		  AND j.id = t.job_id AND j.state IN ('pending', 'running')
		  AND t.state NOT IN ('completed', 'failed', 'cancelled')
		RETURNING 1
	)
	SELECT EXISTS (SELECT 1 FROM changed),
	       (SELECT state FROM jobs WHERE id = $1),
	       (SELECT state FROM tasks WHERE job_id = $1 AND task_id = $2)`

// verdict is what became of one outcome.
type verdict int

const (
	verdictApplied verdict = iota
	verdictDuplicate
	verdictClosed
	verdictUnknown
	// verdictRecheck means the guard held the outcome back because another
	// transaction changed the row while this one waited for it, so the
	// statement's snapshot cannot say why; a later statement can.
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

// ApplyOutcomes records a batch of outcomes in one transaction. The
// outcomes are applied in (job_id, task_id) order, so concurrent
// aggregators lock task rows in one order, and their guarded updates go to
// the server pipelined in one round trip. Each job's counters then move by
// the number of its task rows that changed, job by job in id order, and the
// updated counters decide which jobs this batch made ready to close.
func (s *Store) ApplyOutcomes(ctx context.Context, outcomes []store.Outcome) (store.ApplyReport, error) {
	var report store.ApplyReport
	for i, o := range outcomes {
		if o.State != warren.TaskCompleted && o.State != warren.TaskFailed {
			return report, fmt.Errorf("postgres: apply outcomes: outcome %d (job %q task %d): state must be completed or failed, got %q", i, o.JobID, o.TaskID, o.State)
		}
	}
	if len(outcomes) == 0 {
		return report, nil
	}
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
		if verdicts[i] == verdictRecheck {
			if verdicts[i], err = recheck(ctx, tx, outcomes[i]); err != nil {
				return report, err
			}
		}
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

// applyTasks sends one guarded update per outcome, in order, in one
// pipelined batch, and returns each outcome's verdict by its index.
func (s *Store) applyTasks(ctx context.Context, tx pgx.Tx, outcomes []store.Outcome, order []int) ([]verdict, error) {
	now := s.clock()
	b := &pgx.Batch{}
	for _, i := range order {
		o := outcomes[i]
		finishedAt := now
		if o.FinishedAt != nil {
			finishedAt = o.FinishedAt.UTC()
		}
		b.Queue(applyOutcomeSQL, o.JobID, o.TaskID, string(o.State), []byte(o.Result), o.Error,
			o.Attempts, o.Worker, o.StartedAt, finishedAt)
	}
	verdicts := make([]verdict, len(outcomes))
	br := tx.SendBatch(ctx, b)
	for _, i := range order {
		var (
			changed             bool
			jobState, taskState *string
		)
		if err := br.QueryRow().Scan(&changed, &jobState, &taskState); err != nil {
			_ = br.Close()
			return nil, fmt.Errorf("postgres: apply outcomes: job %q task %d: %w", outcomes[i].JobID, outcomes[i].TaskID, err)
		}
		verdicts[i] = judge(changed, jobState, taskState)
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("postgres: apply outcomes: %w", err)
	}
	return verdicts, nil
}

// recheck classifies an outcome the guard held back after a wait, reading
// the rows as the transaction that changed them committed them.
func recheck(ctx context.Context, tx pgx.Tx, o store.Outcome) (verdict, error) {
	var jobState, taskState *string
	err := tx.QueryRow(ctx, `SELECT (SELECT state FROM jobs WHERE id = $1),
		(SELECT state FROM tasks WHERE job_id = $1 AND task_id = $2)`, o.JobID, o.TaskID).Scan(&jobState, &taskState)
	if err != nil {
		return 0, fmt.Errorf("postgres: apply outcomes: job %q task %d: %w", o.JobID, o.TaskID, err)
	}
	if v := judge(false, jobState, taskState); v != verdictRecheck {
		return v, nil
	}
	// The row changed and changed back (a redrive): this outcome raced with
	// another that was recorded first.
	return verdictDuplicate, nil
}

// bumpCounters adds each job's deltas to its counters, in job id order, in
// one pipelined batch, and returns the jobs the new counts made ready to
// close (they were not ready before this batch).
func bumpCounters(ctx context.Context, tx pgx.Tx, deltas map[string]*counts) ([]string, error) {
	if len(deltas) == 0 {
		return nil, nil
	}
	ids := make([]string, 0, len(deltas))
	for id := range deltas {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	b := &pgx.Batch{}
	for _, id := range ids {
		b.Queue(`
			UPDATE jobs SET completed_tasks = completed_tasks + $2, failed_tasks = failed_tasks + $3
			WHERE id = $1
			RETURNING state, expected_tasks, completed_tasks, failed_tasks,
				tolerated_failures, tolerated_failure_percent, fail_fast`,
			id, deltas[id].completed, deltas[id].failed)
	}
	var ready []string
	br := tx.SendBatch(ctx, b)
	for _, id := range ids {
		var (
			state                       string
			expected, completed, failed int64
			p                           warren.Policy
		)
		err := br.QueryRow().Scan(&state, &expected, &completed, &failed,
			&p.ToleratedFailures, &p.ToleratedFailurePercent, &p.FailFast)
		if err != nil {
			_ = br.Close()
			return nil, fmt.Errorf("count results of job %q: %w", id, err)
		}
		d := deltas[id]
		before := readyToClose(p, expected, completed-d.completed, failed-d.failed)
		if !warren.JobState(state).Terminal() && !before && readyToClose(p, expected, completed, failed) {
			ready = append(ready, id)
		}
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("count results: %w", err)
	}
	return ready, nil
}

// readyToClose reports whether a job with these counters can close: every
// task finished, or it fails fast and its failures exceed the tolerance.
// JobsToClose states the same rule in SQL.
func readyToClose(p warren.Policy, expected, completed, failed int64) bool {
	return completed+failed >= expected || (p.FailFast && !p.Tolerates(failed, expected))
}

// JobsToClose returns up to limit ids of open jobs that are ready to close
// (see readyToClose), oldest first. limit <= 0 means store.DefaultPageSize.
func (s *Store) JobsToClose(ctx context.Context, limit int) ([]string, error) {
	// The fail-fast clause is warren.Policy.Tolerates negated, term by term.
	rows, err := s.pool.Query(ctx, `
		SELECT id FROM jobs
		WHERE state IN ('pending', 'running')
		  AND (completed_tasks + failed_tasks >= expected_tasks
		       OR (fail_fast AND failed_tasks > 0 AND (
		           failed_tasks > tolerated_failures
		           OR expected_tasks <= 0
		           OR failed_tasks::float8 * 100 > tolerated_failure_percent * expected_tasks::float8 + 1e-9)))
		ORDER BY id
		LIMIT $1`, pageSize(limit))
	if err != nil {
		return nil, fmt.Errorf("postgres: jobs to close: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("postgres: jobs to close: %w", err)
	}
	return ids, nil
}
