package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store/internal/engine"
)

// LockTasks implements engine.ReopenTx. Write transactions are
// serialised (BEGIN IMMEDIATE), so reading a row in one is holding it:
// there is nothing more to lock, and states is not read.
func (t *tx) LockTasks(ctx context.Context, jobID string, ids []int64, _ []warren.TaskState) ([]engine.TaskRow, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	set, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	rows, err := t.tx.QueryContext(ctx, `SELECT task_id, state, attempts, worker, error, queued_at, started_at, finished_at, result, generation
		FROM tasks WHERE job_id = ? AND task_id IN (SELECT value FROM json_each(?))
		ORDER BY task_id`, jobID, string(set))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []engine.TaskRow
	for rows.Next() {
		r := engine.TaskRow{TaskRecord: warren.TaskRecord{JobID: jobID}}
		var (
			state                     string
			queued, started, finished sql.NullInt64
			result                    []byte
		)
		if err := rows.Scan(&r.TaskID, &state, &r.Attempts, &r.Worker, &r.Error, &queued, &started, &finished, &result, &r.Generation); err != nil {
			return nil, err
		}
		r.State = warren.TaskState(state)
		r.QueuedAt, r.StartedAt, r.FinishedAt = timeOf(queued), timeOf(started), timeOf(finished)
		r.Result = nilIfEmpty(result)
		out = append(out, r)
	}
	return out, rows.Err()
}

// WriteTasks implements engine.ReopenTx.
func (t *tx) WriteTasks(ctx context.Context, jobID string, rows []engine.TaskRow) error {
	if len(rows) == 0 {
		return nil
	}
	stmt, err := t.tx.PrepareContext(ctx, `UPDATE tasks SET state = ?, attempts = ?, worker = ?, error = ?, result = ?,
		queued_at = ?, started_at = ?, finished_at = ?, generation = ?
		WHERE job_id = ? AND task_id = ?`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for _, r := range rows {
		var result any
		if len(r.Result) > 0 {
			result = []byte(r.Result)
		}
		if _, err := stmt.ExecContext(ctx, string(r.State), r.Attempts, r.Worker, r.Error, result,
			micros(r.QueuedAt), micros(r.StartedAt), micros(r.FinishedAt), r.Generation, jobID, r.TaskID); err != nil {
			return err
		}
	}
	return nil
}

// RequeueTasks implements engine.ReopenTx, one statement per state.
// task_id > 0 keeps the reduce task out.
func (t *tx) RequeueTasks(ctx context.Context, jobID string, states []warren.TaskState) (map[warren.TaskState]int64, error) {
	moved := make(map[warren.TaskState]int64, len(states))
	for _, state := range states {
		res, err := t.tx.ExecContext(ctx, `UPDATE tasks SET state = 'pending', generation = generation + 1,
			error = '', result = NULL, started_at = NULL, finished_at = NULL
			WHERE job_id = ? AND state = ? AND task_id > 0`, jobID, string(state))
		if err != nil {
			return nil, err
		}
		if moved[state], err = res.RowsAffected(); err != nil {
			return nil, err
		}
	}
	return moved, nil
}

// ReopenJob implements engine.ReopenTx.
func (t *tx) ReopenJob(ctx context.Context, r engine.JobReopen) (warren.Job, []byte, bool, error) {
	j, _, err := scanJob(t.tx.QueryRowContext(ctx, `UPDATE jobs SET state = 'running', failed_tasks = failed_tasks - ?,
			finished_at = NULL, error = '', result_location = '', reduce_state = ?, version = version + 1
		WHERE id = ? AND state IN ('failed', 'completed') AND (? < 0 OR version = ?)
		RETURNING `+jobColumns, r.Failed, r.ReduceState, r.ID, r.Version, r.Version))
	if errors.Is(err, sql.ErrNoRows) {
		return warren.Job{}, nil, false, nil
	}
	if err != nil {
		return warren.Job{}, nil, false, err
	}
	var result []byte
	if r.TakeResult {
		result, err = readResult(ctx, t.tx, r.ID)
		if errors.Is(err, sql.ErrNoRows) {
			return j, nil, true, nil
		}
		if err != nil {
			return warren.Job{}, nil, false, err
		}
	}
	if err := deleteResult(ctx, t.tx, r.ID); err != nil {
		return warren.Job{}, nil, false, err
	}
	return j, result, true, nil
}

// AdjustCounters implements engine.ReopenTx.
func (t *tx) AdjustCounters(ctx context.Context, a engine.CounterAdjust) (int64, bool, error) {
	var version int64
	err := t.tx.QueryRowContext(ctx, `UPDATE jobs SET failed_tasks = failed_tasks + ?, version = version + 1
		WHERE id = ? AND state IN ('pending', 'running') AND (? < 0 OR version = ?)
		RETURNING version`, a.Failed, a.JobID, a.Version, a.Version).Scan(&version)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return version, true, nil
}

// InsertReduceTask implements engine.ReduceTx.
func (t *tx) InsertReduceTask(ctx context.Context, jobID string, payload []byte) error {
	if len(payload) == 0 {
		payload = []byte("null")
	}
	_, err := t.tx.ExecContext(ctx, `INSERT INTO tasks (job_id, task_id, payload) VALUES (?, 0, ?)`, jobID, payload)
	return err
}

// SetReduceState implements engine.ReduceTx.
func (t *tx) SetReduceState(ctx context.Context, c engine.ReduceStateChange) (bool, error) {
	res, err := t.tx.ExecContext(ctx, `UPDATE jobs SET reduce_state = ?, version = version + 1
		WHERE id = ? AND state IN ('pending', 'running') AND reduce_state = ? AND (? < 0 OR version = ?)`,
		c.To, c.JobID, c.From, c.Version, c.Version)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}
