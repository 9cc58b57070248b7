package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/internal/engine"
)

// readOutcomeTasksSQL reads what judging an outcome needs of the tasks
// ?2 (a JSON array of task ids) of job ?1, each by primary key.
const readOutcomeTasksSQL = `SELECT task_id, state, generation, attempts, worker, started_at FROM tasks
	WHERE job_id = ?1 AND task_id IN (SELECT value FROM json_each(?2))`

// readJobStateSQL reads a job's state.
const readJobStateSQL = `SELECT state FROM jobs WHERE id = ?`

// writeOutcomeSQL writes one outcome to its task row if the row is still
// open at the generation the outcome was judged at.
const writeOutcomeSQL = `UPDATE tasks SET state = ?, result = ?, error = ?, attempts = ?, worker = ?,
		started_at = ?, finished_at = ?
	WHERE job_id = ? AND task_id = ? AND generation = ? AND state IN ('pending', 'queued')`

// bumpCountersSQL adds to one job's counters and returns its row.
const bumpCountersSQL = `UPDATE jobs
	SET completed_tasks = completed_tasks + ?, failed_tasks = failed_tasks + ?, version = version + 1
	WHERE id = ? RETURNING ` + jobColumns

// LockOutcomeTasks implements engine.OutcomeTx. Write transactions are
// serialised on the writer connection, so reading is locking here. The
// rows are read job by job, one statement for each job's tasks (their ids
// as one JSON array, each found by primary key) and one for its state.
func (t *tx) LockOutcomeTasks(ctx context.Context, refs []store.TaskRef) ([]engine.OutcomeTask, map[string]warren.JobState, error) {
	var (
		jobIDs []string
		byJob  = make(map[string][]int64)
	)
	for _, r := range refs {
		if _, ok := byJob[r.JobID]; !ok {
			jobIDs = append(jobIDs, r.JobID)
		}
		byJob[r.JobID] = append(byJob[r.JobID], r.TaskID)
	}
	readTasks, err := t.stmt(ctx, readOutcomeTasksSQL)
	if err != nil {
		return nil, nil, err
	}
	defer readTasks.Close()
	readJob, err := t.stmt(ctx, readJobStateSQL)
	if err != nil {
		return nil, nil, err
	}
	defer readJob.Close()

	tasks := make([]engine.OutcomeTask, 0, len(refs))
	jobs := make(map[string]warren.JobState, len(jobIDs))
	for _, id := range jobIDs {
		if tasks, err = appendOutcomeTasks(ctx, readTasks, id, byJob[id], tasks); err != nil {
			return nil, nil, fmt.Errorf("read tasks of job %q: %w", id, err)
		}
		var state string
		err := readJob.QueryRowContext(ctx, id).Scan(&state)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read job %q: %w", id, err)
		}
		jobs[id] = warren.JobState(state)
	}
	return tasks, jobs, nil
}

// appendOutcomeTasks appends to tasks the rows of job jobID's tasks ids
// that exist, as readTasks reads them.
func appendOutcomeTasks(ctx context.Context, readTasks *sql.Stmt, jobID string, ids []int64, tasks []engine.OutcomeTask) ([]engine.OutcomeTask, error) {
	set := make([]byte, 0, 2+8*len(ids))
	set = append(set, '[')
	for i, id := range ids {
		if i > 0 {
			set = append(set, ',')
		}
		set = strconv.AppendInt(set, id, 10)
	}
	set = append(set, ']')
	rows, err := readTasks.QueryContext(ctx, jobID, string(set))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			task    = engine.OutcomeTask{TaskRef: store.TaskRef{JobID: jobID}}
			state   string
			started sql.NullInt64
		)
		if err := rows.Scan(&task.TaskID, &state, &task.Generation, &task.Attempts, &task.Worker, &started); err != nil {
			return nil, err
		}
		task.State = warren.TaskState(state)
		task.StartedAt = timeOf(started)
		tasks = append(tasks, task)
	}
	return tasks, rows.Err()
}

// WriteOutcomes implements engine.OutcomeTx: one guarded update by
// primary key per write, with one prepared statement, then the counters.
func (t *tx) WriteOutcomes(ctx context.Context, writes []engine.TaskWrite, deltas []engine.CounterDelta) (int, []warren.Job, error) {
	setTask, err := t.stmt(ctx, writeOutcomeSQL)
	if err != nil {
		return 0, nil, err
	}
	defer setTask.Close()
	written := 0
	for _, w := range writes {
		var result any // nil []byte would not be NULL to every driver
		if w.Result != nil {
			result = w.Result
		}
		res, err := setTask.ExecContext(ctx, string(w.State), result, w.Error, w.Attempts, w.Worker,
			micros(w.StartedAt), w.FinishedAt.UnixMicro(), w.JobID, w.TaskID, w.Generation)
		if err != nil {
			return 0, nil, fmt.Errorf("task %d of job %q: %w", w.TaskID, w.JobID, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, nil, err
		}
		written += int(n)
	}
	jobs, err := t.BumpCounters(ctx, deltas)
	return written, jobs, err
}

// BumpCounters implements engine.OutcomeTx: one update per job, with one
// prepared statement.
func (t *tx) BumpCounters(ctx context.Context, deltas []engine.CounterDelta) ([]warren.Job, error) {
	if len(deltas) == 0 {
		return nil, nil
	}
	deltas = slices.SortedFunc(slices.Values(deltas), func(a, b engine.CounterDelta) int { return cmp.Compare(a.JobID, b.JobID) })
	bump, err := t.stmt(ctx, bumpCountersSQL)
	if err != nil {
		return nil, err
	}
	defer bump.Close()
	jobs := make([]warren.Job, 0, len(deltas))
	for _, d := range deltas {
		j, _, err := scanJob(bump.QueryRowContext(ctx, d.Completed, d.Failed, d.JobID))
		if err != nil {
			return nil, fmt.Errorf("count results of job %q: %w", d.JobID, err)
		}
		jobs = append(jobs, j)
	}
	return jobs, nil
}

var _ engine.CloseCandidateReader = engineDriver{}

// CloseCandidates implements engine.CloseCandidateReader on the read
// pool, in creation order through jobs_open. The cursor is the last
// job's seq, which is never reused.
func (d engineDriver) CloseCandidates(ctx context.Context, after string, limit int) ([]warren.Job, string, error) {
	var seq int64
	if after != "" {
		var err error
		if seq, err = strconv.ParseInt(after, 10, 64); err != nil {
			return nil, "", fmt.Errorf("cursor %q: %w", after, err)
		}
	}
	rows, err := d.s.r.QueryContext(ctx, `SELECT `+jobColumns+` FROM jobs INDEXED BY jobs_open
		WHERE state IN ('pending', 'running') AND seq > ?
		  AND (completed_tasks + failed_tasks >= expected_tasks OR (fail_fast = 1 AND failed_tasks > 0))
		ORDER BY seq
		LIMIT ?`, seq, limit)
	if err != nil {
		return nil, "", err
	}
	defer rows.Close()
	var jobs []warren.Job
	for rows.Next() {
		j, s, err := scanJob(rows)
		if err != nil {
			return nil, "", err
		}
		jobs, seq = append(jobs, j), s
	}
	if err := rows.Err(); err != nil {
		return nil, "", err
	}
	return jobs, strconv.FormatInt(seq, 10), nil
}
