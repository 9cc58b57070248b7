package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// ApplyOutcomes records a batch of outcomes in one write transaction.
//
// An outcome whose job does not exist, or whose task id is outside the
// job's 1..N, is Unknown. An outcome for a closed job is Closed, whatever
// its task. Otherwise the task row changes only if it is pending or queued
// and the outcome's generation is the task's or 0 (Applied), else the
// outcome is a Duplicate; an outcome with Attempts 0
// keeps the stored attempts but records at least 1, one without Worker
// keeps the stored worker, and one without FinishedAt is stamped with the
// store's clock. Each job's counters move
// once, by the number of its rows that changed, and a job is listed in
// ReadyToClose when the batch made it ready (store.BecameReady).
//
// An outcome whose State is neither completed nor failed fails the whole
// batch before anything is written.
func (s *Store) ApplyOutcomes(ctx context.Context, outcomes []store.Outcome) (store.ApplyReport, error) {
	if err := store.ValidateOutcomes(outcomes); err != nil {
		return store.ApplyReport{}, fmt.Errorf("sqlite: apply outcomes: %w", err)
	}
	if len(outcomes) == 0 {
		return store.ApplyReport{}, nil
	}
	outcomes = store.SanitizeOutcomes(outcomes)
	var report store.ApplyReport
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		a, err := newApplier(ctx, tx)
		if err != nil {
			return err
		}
		defer a.close()
		report = store.ApplyReport{}
		for i, o := range outcomes {
			if err := a.apply(ctx, i, o, &report); err != nil {
				return err
			}
		}
		return a.flush(ctx, &report)
	})
	if err != nil {
		return store.ApplyReport{}, fmt.Errorf("sqlite: apply outcomes: %w", err)
	}
	return report, nil
}

// applier applies the outcomes of one batch inside its transaction,
// keeping each job it touched in memory until flush moves the counters.
type applier struct {
	tx      *sql.Tx
	getJob  *sql.Stmt
	setTask *sql.Stmt
	jobs    map[string]*batchJob // nil value: the job does not exist
	order   []*batchJob          // the existing jobs in first-seen order
}

// batchJob is a job as the batch found it, with how many of its tasks the
// batch moved to each terminal state.
type batchJob struct {
	job warren.Job
	counts
}

// newApplier prepares the batch's statements in tx. An outcome without
// attempts (0, unknown) keeps the stored count, but at least 1: the task
// ran to produce it. One without a worker ("", unknown) keeps the stored
// worker.
func newApplier(ctx context.Context, tx *sql.Tx) (*applier, error) {
	getJob, err := tx.PrepareContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = ?`)
	if err != nil {
		return nil, err
	}
	setTask, err := tx.PrepareContext(ctx, `UPDATE tasks SET
			state = ?1, result = ?2, error = ?3,
			attempts = CASE WHEN ?4 > 0 THEN ?4 ELSE MAX(attempts, 1) END,
			worker = CASE WHEN ?5 <> '' THEN ?5 ELSE worker END, started_at = COALESCE(?6, started_at), finished_at = ?7
		WHERE job_id = ?8 AND task_id = ?9 AND state IN ('pending', 'queued')
		  AND (?10 = 0 OR generation = ?10)`)
	if err != nil {
		getJob.Close()
		return nil, err
	}
	return &applier{tx: tx, getJob: getJob, setTask: setTask, jobs: make(map[string]*batchJob)}, nil
}

// close releases the prepared statements.
func (a *applier) close() {
	a.getJob.Close()
	a.setTask.Close()
}

// apply records outcome i in the task row and in report.
func (a *applier) apply(ctx context.Context, i int, o store.Outcome, report *store.ApplyReport) error {
	j, err := a.job(ctx, o.JobID)
	if err != nil {
		return err
	}
	if j == nil || o.TaskID < 1 || o.TaskID > j.job.ExpectedTasks {
		report.Unknown = append(report.Unknown, i)
		return nil
	}
	if j.job.State.Terminal() {
		report.Closed++
		return nil
	}
	finished := o.FinishedAt
	if finished == nil {
		at := now()
		finished = &at
	}
	var result any
	if len(o.Result) > 0 {
		result = []byte(o.Result)
	}
	res, err := a.setTask.ExecContext(ctx, string(o.State), result, o.Error, o.Attempts, o.Worker,
		micros(o.StartedAt), micros(finished), o.JobID, o.TaskID, o.Generation)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		report.Duplicates++
		return nil
	}
	report.Applied++
	if o.State == warren.TaskCompleted {
		j.completed++
	} else {
		report.AppliedFailed++
		j.failed++
	}
	return nil
}

// job returns the batch's view of job id, loading it on first use; nil
// when it does not exist.
func (a *applier) job(ctx context.Context, id string) (*batchJob, error) {
	if j, ok := a.jobs[id]; ok {
		return j, nil
	}
	job, _, err := scanJob(a.getJob.QueryRowContext(ctx, id))
	if errors.Is(err, sql.ErrNoRows) {
		a.jobs[id] = nil
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	j := &batchJob{job: job}
	a.jobs[id] = j
	a.order = append(a.order, j)
	return j, nil
}

// flush moves the counters of every job the batch changed, in first-seen
// order, and lists the jobs it made ready to close.
func (a *applier) flush(ctx context.Context, report *store.ApplyReport) error {
	var deltas []jobCounts
	for _, j := range a.order {
		deltas = append(deltas, jobCounts{id: j.job.ID, counts: j.counts})
	}
	ready, err := bumpCounters(ctx, a.tx, deltas)
	report.ReadyToClose = ready
	return err
}

// counts is how many tasks of one job a transaction moved to each
// terminal state.
type counts struct{ completed, failed int64 }

// jobCounts is one job's counts.
type jobCounts struct {
	id string
	counts
}

// bumpCounters adds each job's counts to its counters, in the order
// given, skipping jobs without any, and returns the jobs the new counters
// made ready to close (store.BecameReady).
func bumpCounters(ctx context.Context, tx *sql.Tx, deltas []jobCounts) ([]string, error) {
	var ready []string
	for _, d := range deltas {
		if d.completed == 0 && d.failed == 0 {
			continue
		}
		j, _, err := scanJob(tx.QueryRowContext(ctx, `UPDATE jobs
			SET completed_tasks = completed_tasks + ?, failed_tasks = failed_tasks + ?, version = version + 1
			WHERE id = ? RETURNING `+jobColumns, d.completed, d.failed, d.id))
		if err != nil {
			return nil, fmt.Errorf("count results of job %s: %w", d.id, err)
		}
		if store.BecameReady(j, d.completed, d.failed) {
			ready = append(ready, d.id)
		}
	}
	return ready, nil
}

// JobsToClose returns up to limit ids of open jobs that are ready to close
// (store.ReadyToClose), oldest first. limit <= 0 means
// store.DefaultPageSize.
func (s *Store) JobsToClose(ctx context.Context, limit int) ([]string, error) {
	limit = store.PageSize(limit)
	// The SQL only narrows to candidates (finished, or failing fast with a
	// failure); store.ReadyToClose decides, so the tolerance arithmetic is
	// never written in SQL. The rows are read lazily, so the candidates
	// past the limit are never read.
	rows, err := s.r.QueryContext(ctx, `SELECT `+jobColumns+` FROM jobs INDEXED BY jobs_open
		WHERE state IN ('pending', 'running')
		AND (completed_tasks + failed_tasks >= expected_tasks OR (fail_fast = 1 AND failed_tasks > 0))
		ORDER BY seq`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: jobs to close: %w", err)
	}
	defer rows.Close()
	var ids []string
	for len(ids) < limit && rows.Next() {
		j, _, err := scanJob(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: jobs to close: %w", err)
		}
		if store.ReadyToClose(j) {
			ids = append(ids, j.ID)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: jobs to close: %w", err)
	}
	return ids, nil
}
