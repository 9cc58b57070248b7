package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// requeueSQL locks job $1's tasks in the states $2, in task id order, moves
// them back to pending at their next generation, with their attempts kept
// and the rest of their last run cleared (queued_at stays: the relay's mark replaces it), and counts
// how many were failed and how many it moved in all.
const requeueSQL = `
	WITH locked AS (
		SELECT task_id, state FROM tasks
		WHERE job_id = $1 AND state = ANY($2::text[])
		ORDER BY task_id
		FOR UPDATE
	), requeued AS (
		UPDATE tasks SET state = 'pending', generation = tasks.generation + 1,
			error = '', result = NULL, started_at = NULL, finished_at = NULL
		FROM locked
		WHERE tasks.job_id = $1 AND tasks.task_id = locked.task_id
		RETURNING locked.state
	)
	SELECT count(*) FILTER (WHERE state = 'failed'), count(*) FROM requeued`

// reopenJobSQL moves closed job $1 back to running, without finished_at,
// error or result location, and drops its failed counter by $2.
const reopenJobSQL = `
	UPDATE jobs SET state = 'running', failed_tasks = failed_tasks - $2,
		finished_at = NULL, error = '', result_location = '', version = version + 1
	WHERE id = $1 AND state IN ('failed', 'completed')
	RETURNING ` + jobColumns

// RedriveJob reopens job id, closed as failed or completed, in one
// transaction: its failed tasks, and the tasks that closing it cancelled
// (a fail-fast job's tasks that never finished), go back to pending with
// their attempts kept; the failed counter drops by the failed ones; the
// job is running again, without finished_at, error, result location or
// stored result. It returns the reopened job and how many tasks went back
// to pending, both kinds together, so that completed + failed + pending
// tasks is expected again. The task rows are locked before the job row
// (the package's lock order), and the job moves by a guarded transition:
// of concurrent redrives of one job exactly one succeeds. An open or
// cancelled job, or one without a failed task: warren.ErrConflict; an
// unknown one: warren.ErrNotFound.
func (s *Store) RedriveJob(ctx context.Context, id string) (warren.Job, int, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return warren.Job{}, 0, fmt.Errorf("postgres: redrive job %q: %w", id, err)
	}
	defer rollback(ctx, tx)

	var state string
	err = tx.QueryRow(ctx, `SELECT state FROM jobs WHERE id = $1`, id).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return warren.Job{}, 0, notFound(id)
	}
	if err != nil {
		return warren.Job{}, 0, fmt.Errorf("postgres: redrive job %q: %w", id, err)
	}
	if !store.Reopenable(warren.JobState(state)) {
		return warren.Job{}, 0, fmt.Errorf("postgres: redrive job %q: %w: the job is %s", id, warren.ErrConflict, state)
	}
	var failed, requeued int64
	states := []string{string(warren.TaskFailed), string(warren.TaskCancelled)}
	if err := tx.QueryRow(ctx, requeueSQL, id, states).Scan(&failed, &requeued); err != nil {
		return warren.Job{}, 0, fmt.Errorf("postgres: redrive job %q: requeue tasks: %w", id, err)
	}
	if failed == 0 {
		return warren.Job{}, 0, fmt.Errorf("postgres: redrive job %q: %w: the job has no failed task", id, warren.ErrConflict)
	}
	job, err := scanJob(tx.QueryRow(ctx, reopenJobSQL, id, failed))
	if errors.Is(err, pgx.ErrNoRows) {
		exists, err := s.jobExists(ctx, tx, id)
		if err != nil {
			return warren.Job{}, 0, err
		}
		if !exists { // deleted meanwhile (DeleteJob, DeleteExpiredJobs)
			return warren.Job{}, 0, notFound(id)
		}
		return warren.Job{}, 0, fmt.Errorf("postgres: redrive job %q: %w: the job was reopened meanwhile", id, warren.ErrConflict)
	}
	if err != nil {
		return warren.Job{}, 0, fmt.Errorf("postgres: redrive job %q: %w", id, err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM job_results WHERE job_id = $1`, id); err != nil {
		return warren.Job{}, 0, fmt.Errorf("postgres: redrive job %q: delete result: %w", id, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return warren.Job{}, 0, fmt.Errorf("postgres: redrive job %q: commit: %w", id, err)
	}
	return job, int(requeued), nil
}

// reopenTries bounds how often ReopenTask starts over when the task's job
// closed between its first look and its lock.
const reopenTries = 5

// ReopenTask makes failed task taskID of job jobID queued again at its
// next generation (queued_at now, attempts kept, error, result and
// timestamps cleared) for a dead-letter replay that republishes it, and
// drops the job's failed counter by one, in one transaction. A closed job
// (failed or completed) reopens as running, as RedriveJob leaves it, and
// its tasks that closing it cancelled go back to pending at their next
// generation: they never ran, and the job must be able to close again
// with every task accounted for. It returns the task's new generation and
// true; or false, changing nothing, when the task is not failed or the job
// is cancelled. Unknown job or task: warren.ErrNotFound.
func (s *Store) ReopenTask(ctx context.Context, jobID string, taskID int64) (int, bool, error) {
	for range reopenTries {
		generation, again, err := s.reopenTask(ctx, jobID, taskID)
		if err != nil {
			return 0, false, fmt.Errorf("postgres: reopen task %d of job %q: %w", taskID, jobID, err)
		}
		if !again {
			return generation, generation > 0, nil
		}
	}
	return 0, false, fmt.Errorf("postgres: reopen task %d of job %q: the job closed under it %d times", taskID, jobID, reopenTries)
}

// reopenTask is one try of ReopenTask. It locks the task rows it changes
// (the task, and for a closed job its cancelled tasks) in task id order
// before the job row; which rows those are depends on the job's state as
// first read, so when the locked job row shows the job closed meanwhile
// it changes nothing and asks to start over (again). generation is the
// task's new one, 0 when it was not reopened.
func (s *Store) reopenTask(ctx context.Context, jobID string, taskID int64) (generation int, again bool, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, false, err
	}
	defer rollback(ctx, tx)

	var seen string
	err = tx.QueryRow(ctx, `SELECT state FROM jobs WHERE id = $1`, jobID).Scan(&seen)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, warren.ErrNotFound
	}
	if err != nil {
		return 0, false, err
	}
	wasClosed := store.Reopenable(warren.JobState(seen))
	rows, err := tx.Query(ctx, `
		SELECT task_id, state FROM tasks
		WHERE job_id = $1 AND (task_id = $2 OR ($3 AND state = 'cancelled'))
		ORDER BY task_id
		FOR UPDATE`, jobID, taskID, wasClosed)
	if err != nil {
		return 0, false, err
	}
	var (
		taskState string
		cancelled []int64
	)
	err = forEachRow(rows, func(id int64, state string) {
		if id == taskID {
			taskState = state
		} else {
			cancelled = append(cancelled, id)
		}
	})
	if err != nil {
		return 0, false, err
	}
	if taskState == "" {
		return 0, false, fmt.Errorf("task %d: %w", taskID, warren.ErrNotFound)
	}
	if warren.TaskState(taskState) != warren.TaskFailed {
		return 0, false, nil
	}
	var state string
	err = tx.QueryRow(ctx, `SELECT state FROM jobs WHERE id = $1 FOR UPDATE`, jobID).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) { // deleted meanwhile (DeleteJob, DeleteExpiredJobs)
		return 0, false, warren.ErrNotFound
	}
	if err != nil {
		return 0, false, err
	}
	isClosed := store.Reopenable(warren.JobState(state))
	switch {
	case warren.JobState(state) == warren.JobCancelled:
		return 0, false, nil
	case isClosed && !wasClosed:
		return 0, true, nil
	}
	if err := tx.QueryRow(ctx, `
		UPDATE tasks SET state = 'queued', queued_at = $3, generation = generation + 1,
			error = '', result = NULL, started_at = NULL, finished_at = NULL
		WHERE job_id = $1 AND task_id = $2
		RETURNING generation`, jobID, taskID, s.clock()).Scan(&generation); err != nil {
		return 0, false, err
	}
	if isClosed {
		if _, err := tx.Exec(ctx, `
			UPDATE tasks SET state = 'pending', generation = generation + 1,
				error = '', result = NULL, started_at = NULL, finished_at = NULL
			WHERE job_id = $1 AND task_id = ANY($2) AND state = 'cancelled'`, jobID, cancelled); err != nil {
			return 0, false, err
		}
		if _, err := tx.Exec(ctx, reopenJobSQL, jobID, 1); err != nil {
			return 0, false, err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM job_results WHERE job_id = $1`, jobID); err != nil {
			return 0, false, err
		}
	} else if _, err := tx.Exec(ctx, `UPDATE jobs SET failed_tasks = failed_tasks - 1, version = version + 1 WHERE id = $1`, jobID); err != nil {
		return 0, false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, false, err
	}
	return generation, false, nil
}

// forEachRow calls fn with each (task_id, state) row of rows.
func forEachRow(rows pgx.Rows, fn func(id int64, state string)) error {
	defer rows.Close()
	for rows.Next() {
		var (
			id    int64
			state string
		)
		if err := rows.Scan(&id, &state); err != nil {
			return err
		}
		fn(id, state)
	}
	return rows.Err()
}
