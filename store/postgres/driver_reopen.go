package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store/internal/engine"
)

// lockTasksSQL locks job $1's tasks named by $2 and those in the states
// $3, in task id order, and returns the rows of those named by $2. A CTE
// with FOR UPDATE is never inlined: it locks every row it selects, read
// whole by the outer filter.
const lockTasksSQL = `
	WITH locked AS (
		SELECT task_id, state, attempts, worker, error, queued_at, started_at, finished_at, result, generation
		FROM tasks
		WHERE job_id = $1 AND (task_id = ANY($2::bigint[]) OR state = ANY($3::text[]))
		ORDER BY task_id
		FOR UPDATE
	)
	SELECT * FROM locked WHERE task_id = ANY($2::bigint[]) ORDER BY task_id`

// LockTasks implements engine.ReopenTx, in one statement.
func (t *tx) LockTasks(ctx context.Context, jobID string, ids []int64, states []warren.TaskState) ([]engine.TaskRow, error) {
	rows, err := t.tx.Query(ctx, lockTasksSQL, jobID, ids, stateNames(states))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (engine.TaskRow, error) {
		r := engine.TaskRow{TaskRecord: warren.TaskRecord{JobID: jobID}}
		var (
			state  string
			result []byte
		)
		err := row.Scan(&r.TaskID, &state, &r.Attempts, &r.Worker, &r.Error, &r.QueuedAt, &r.StartedAt, &r.FinishedAt, &result, &r.Generation)
		r.State = warren.TaskState(state)
		r.QueuedAt, r.StartedAt, r.FinishedAt = utc(r.QueuedAt), utc(r.StartedAt), utc(r.FinishedAt)
		if len(result) > 0 {
			r.Result = result
		}
		return r, err
	})
}

// WriteTasks implements engine.ReopenTx: one statement per row, pipelined
// in one round trip.
func (t *tx) WriteTasks(ctx context.Context, jobID string, rows []engine.TaskRow) error {
	if len(rows) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for _, r := range rows {
		var result []byte
		if len(r.Result) > 0 {
			result = r.Result
		}
		b.Queue(`UPDATE tasks SET state = $3, attempts = $4, worker = $5, error = $6, result = $7,
				queued_at = $8, started_at = $9, finished_at = $10, generation = $11
			WHERE job_id = $1 AND task_id = $2`,
			jobID, r.TaskID, string(r.State), r.Attempts, r.Worker, r.Error, result, r.QueuedAt, r.StartedAt, r.FinishedAt, r.Generation)
	}
	return t.tx.SendBatch(ctx, b).Close()
}

// requeueTasksSQL locks job $1's map tasks (task_id > 0: never the
// reduce task) in the states $2, in task id order, moves them back to pending at their next generation, with their
// attempts, worker and queued_at kept (the relay's mark replaces
// queued_at) and the rest of their last run cleared, and counts them by
// the state they left.
const requeueTasksSQL = `
	WITH locked AS (
		SELECT task_id, state FROM tasks
		WHERE job_id = $1 AND state = ANY($2::text[]) AND task_id > 0
		ORDER BY task_id
		FOR UPDATE
	), requeued AS (
		UPDATE tasks SET state = 'pending', generation = tasks.generation + 1,
			error = '', result = NULL, started_at = NULL, finished_at = NULL
		FROM locked
		WHERE tasks.job_id = $1 AND tasks.task_id = locked.task_id
		RETURNING locked.state
	)
	SELECT state, count(*) FROM requeued GROUP BY state`

// RequeueTasks implements engine.ReopenTx, in one statement.
func (t *tx) RequeueTasks(ctx context.Context, jobID string, states []warren.TaskState) (map[warren.TaskState]int64, error) {
	rows, err := t.tx.Query(ctx, requeueTasksSQL, jobID, stateNames(states))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	moved := make(map[warren.TaskState]int64, len(states))
	for rows.Next() {
		var (
			state string
			n     int64
		)
		if err := rows.Scan(&state, &n); err != nil {
			return nil, err
		}
		moved[warren.TaskState(state)] = n
	}
	return moved, rows.Err()
}

// reopenJobSQL moves job $1, if closed as failed or completed and, unless
// $3 < 0, still at version $3, back to running, without finished_at,
// error or result location, drops its failed counter by $2, sets its
// reduce_state to $5, and deletes
// its stored result only if it moved, returning the result when $4.
const reopenJobSQL = `
	WITH reopened AS (
		UPDATE jobs SET state = 'running', failed_tasks = failed_tasks - $2,
			finished_at = NULL, error = '', result_location = '', reduce_state = $5, version = version + 1
		WHERE id = $1 AND state IN ('failed', 'completed') AND ($3::bigint < 0 OR version = $3::bigint)
		RETURNING ` + jobColumns + `
	), dropped AS (
		DELETE FROM job_results WHERE job_id = $1 AND EXISTS (SELECT 1 FROM reopened)
		RETURNING data
	)
	SELECT reopened.*, CASE WHEN $4::boolean THEN (SELECT data FROM dropped) END FROM reopened`

// ReopenJob implements engine.ReopenTx, in one statement.
func (t *tx) ReopenJob(ctx context.Context, r engine.JobReopen) (warren.Job, []byte, bool, error) {
	var result []byte
	j, err := scanJob(t.tx.QueryRow(ctx, reopenJobSQL, r.ID, r.Failed, r.Version, r.TakeResult, r.ReduceState), &result)
	if errors.Is(err, pgx.ErrNoRows) {
		return warren.Job{}, nil, false, nil
	}
	if err != nil {
		return warren.Job{}, nil, false, err
	}
	return j, result, true, nil
}

// AdjustCounters implements engine.ReopenTx.
func (t *tx) AdjustCounters(ctx context.Context, a engine.CounterAdjust) (int64, bool, error) {
	var version int64
	err := t.tx.QueryRow(ctx, `
		UPDATE jobs SET failed_tasks = failed_tasks + $2, version = version + 1
		WHERE id = $1 AND state IN ('pending', 'running') AND ($3::bigint < 0 OR version = $3::bigint)
		RETURNING version`, a.JobID, a.Failed, a.Version).Scan(&version)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return version, true, nil
}

// stateNames is states as the schema stores them.
func stateNames(states []warren.TaskState) []string {
	names := make([]string, len(states))
	for i, s := range states {
		names[i] = string(s)
	}
	return names
}

// InsertReduceTask implements engine.ReduceTx.
func (t *tx) InsertReduceTask(ctx context.Context, jobID string, payload []byte) error {
	if len(payload) == 0 {
		payload = []byte("null")
	}
	_, err := t.tx.Exec(ctx, `INSERT INTO tasks (job_id, task_id, state, payload) VALUES ($1, 0, 'pending', $2)`, jobID, payload)
	return err
}

// SetReduceState implements engine.ReduceTx.
func (t *tx) SetReduceState(ctx context.Context, c engine.ReduceStateChange) (bool, error) {
	tag, err := t.tx.Exec(ctx, `
		UPDATE jobs SET reduce_state = $2, version = version + 1
		WHERE id = $1 AND state IN ('pending', 'running') AND reduce_state = $3 AND ($4::bigint < 0 OR version = $4::bigint)`,
		c.JobID, c.To, c.From, c.Version)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}
