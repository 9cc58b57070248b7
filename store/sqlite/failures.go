package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// RedriveJob reopens job id, closed as failed or completed, in one write
// transaction: its failed tasks, and the tasks that closing it cancelled
// (a fail-fast job's tasks that never finished), go back to pending with
// their attempts kept and their error, result and timestamps cleared
// (queued_at stays: the relay's mark replaces it); the failed counter
// drops by the failed ones; the job is running again, without
// finished_at, error, result location or stored result. It returns the
// reopened job and how many tasks went back to pending, both kinds
// together, so that completed + failed + pending tasks is expected again.
// An open or cancelled job, or one without a failed task, wraps
// warren.ErrConflict; an unknown one, warren.ErrNotFound.
func (s *Store) RedriveJob(ctx context.Context, id string) (warren.Job, int, error) {
	var (
		job      warren.Job
		requeued int64
	)
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		j, err := getJob(ctx, tx, "id = ?", id)
		if err != nil {
			return err
		}
		if !store.Reopenable(j.State) {
			return fmt.Errorf("job is %s: %w", j.State, warren.ErrConflict)
		}
		failed, err := requeueTasks(ctx, tx, id, warren.TaskFailed)
		if err != nil {
			return err
		}
		if failed == 0 {
			return fmt.Errorf("job has no failed task: %w", warren.ErrConflict)
		}
		cancelled, err := requeueTasks(ctx, tx, id, warren.TaskCancelled)
		if err != nil {
			return err
		}
		if err := reopenJob(ctx, tx, id, failed); err != nil {
			return err
		}
		requeued = failed + cancelled
		job, err = getJob(ctx, tx, "id = ?", id)
		return err
	})
	if err != nil {
		return warren.Job{}, 0, fmt.Errorf("sqlite: redrive job %s: %w", id, err)
	}
	return job, int(requeued), nil
}

// ReopenTask makes failed task taskID of job jobID queued again at its
// next generation (queued_at now, attempts kept, error, result and
// timestamps cleared) for a dead-letter replay that republishes it, and
// drops the job's failed counter by one, in one write transaction. A
// closed job (failed or completed) reopens as running, as RedriveJob
// leaves it, and its tasks that closing it cancelled go back to pending
// at their next generation: they never ran, and the job must be able to
// close again with every task accounted for. It returns the task's new
// generation and true; or false, changing nothing, when the task is not
// failed or the job is cancelled. An unknown job or task wraps
// warren.ErrNotFound.
func (s *Store) ReopenTask(ctx context.Context, jobID string, taskID int64) (int, bool, error) {
	var generation int
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		generation = 0
		j, err := getJob(ctx, tx, "id = ?", jobID)
		if err != nil {
			return err
		}
		var state string
		err = tx.QueryRowContext(ctx, `SELECT state FROM tasks WHERE job_id = ? AND task_id = ?`, jobID, taskID).Scan(&state)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("task %d: %w", taskID, warren.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if j.State == warren.JobCancelled || warren.TaskState(state) != warren.TaskFailed {
			return nil
		}
		if err := tx.QueryRowContext(ctx, `UPDATE tasks SET state = 'queued', queued_at = ?, generation = generation + 1,
			error = '', result = NULL, started_at = NULL, finished_at = NULL
			WHERE job_id = ? AND task_id = ? AND state = 'failed'
			RETURNING generation`, now().UnixMicro(), jobID, taskID).Scan(&generation); err != nil {
			return err
		}
		if store.Reopenable(j.State) {
			if _, err := requeueTasks(ctx, tx, jobID, warren.TaskCancelled); err != nil {
				return err
			}
			return reopenJob(ctx, tx, jobID, 1)
		}
		_, err = tx.ExecContext(ctx, `UPDATE jobs SET failed_tasks = failed_tasks - 1, version = version + 1 WHERE id = ?`, jobID)
		return err
	})
	if err != nil {
		return 0, false, fmt.Errorf("sqlite: reopen task %d of job %s: %w", taskID, jobID, err)
	}
	return generation, generation > 0, nil
}

// requeueTasks moves job id's tasks in state back to pending, at their
// next generation, their attempts kept and the rest of their last run
// cleared, and returns how many it moved.
func requeueTasks(ctx context.Context, tx *sql.Tx, id string, state warren.TaskState) (int64, error) {
	res, err := tx.ExecContext(ctx, `UPDATE tasks SET state = 'pending', generation = generation + 1,
		error = '', result = NULL, started_at = NULL, finished_at = NULL
		WHERE job_id = ? AND state = ?`, id, string(state))
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// reopenJob moves closed job id back to running, without finished_at,
// error, result location or stored result, and drops its failed counter
// by failed.
func reopenJob(ctx context.Context, tx *sql.Tx, id string, failed int64) error {
	if _, err := tx.ExecContext(ctx, `UPDATE jobs SET state = 'running', failed_tasks = failed_tasks - ?,
		finished_at = NULL, error = '', result_location = '', version = version + 1
		WHERE id = ?`, failed, id); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `DELETE FROM job_results WHERE job_id = ?`, id)
	return err
}
