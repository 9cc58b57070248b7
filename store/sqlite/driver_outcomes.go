package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/internal/engine"
)

// readOutcomeTasksSQL reads job ?1's state and what judging an outcome
// needs of its tasks ?2 (a JSON array of task ids), each by primary key,
// in one statement: no row when the job does not exist, one row with
// NULL task columns when none of the tasks does.
const readOutcomeTasksSQL = `SELECT j.state, j.reduce_state, t.task_id, t.state, t.generation, t.attempts, t.worker, t.started_at
	FROM jobs j LEFT JOIN tasks t ON t.job_id = j.id AND t.task_id IN (SELECT value FROM json_each(?2))
	WHERE j.id = ?1`

// writeOutcomesSQL writes n outcomes, each to its task row if the row is
// still open at the generation the outcome was judged at: one statement
// for n rows, each found by primary key, so that a large batch pays the
// per-statement cost (binding, stepping, database/sql's call) once per n
// rows. Each row of the VALUES list is (state, result, error, attempts,
// worker, started_at, finished_at, job_id, task_id, generation).
func writeOutcomesSQL(n int) string {
	var b strings.Builder
	b.WriteString(`UPDATE tasks SET state = w.column1, result = w.column2, error = w.column3,
		attempts = w.column4, worker = w.column5, started_at = w.column6, finished_at = w.column7
	FROM (VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
	}
	b.WriteString(`) AS w
	WHERE tasks.job_id = w.column8 AND tasks.task_id = w.column9 AND tasks.generation = w.column10
	  AND tasks.state IN ('pending', 'queued')`)
	return b.String()
}

// writeChunks are the row counts of the prepared writeOutcomesSQL
// statements, largest first: WriteOutcomes writes a batch in chunks of
// these sizes, so a batch of any size takes at most a few statements of
// each size but the largest, all prepared once (writerQueries).
var writeChunks = []int{64, 16, 4, 1}

// writeOutcomesQueries are writeOutcomesSQL of each of writeChunks.
var writeOutcomesQueries = func() map[int]string {
	m := make(map[int]string, len(writeChunks))
	for _, n := range writeChunks {
		m[n] = writeOutcomesSQL(n)
	}
	return m
}()

// writeAttemptsSQL records n attempt rows (engine.AttemptWrite) in one
// statement, as writeOutcomesSQL writes n outcomes: a row already there
// stays unless the new one is of a later generation. Each row of the
// VALUES list is (job_id, task_id, attempt, generation, outcome, worker,
// started_at, finished_at, error, traceback).
func writeAttemptsSQL(n int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO task_attempts (job_id, task_id, attempt, generation, outcome, worker,
		started_at, finished_at, error, traceback) VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
	}
	b.WriteString(` ON CONFLICT (job_id, task_id, attempt) DO UPDATE SET generation = excluded.generation,
		outcome = excluded.outcome, worker = excluded.worker, started_at = excluded.started_at,
		finished_at = excluded.finished_at, error = excluded.error, traceback = excluded.traceback
	WHERE excluded.generation > task_attempts.generation`)
	return b.String()
}

// writeAttemptsQueries are writeAttemptsSQL of each of writeChunks.
var writeAttemptsQueries = func() map[int]string {
	m := make(map[int]string, len(writeChunks))
	for _, n := range writeChunks {
		m[n] = writeAttemptsSQL(n)
	}
	return m
}()

// pruneAttemptsSQL deletes task (?1, ?2)'s attempt rows through attempt
// ?3: those past the number the store keeps.
const pruneAttemptsSQL = `DELETE FROM task_attempts WHERE job_id = ?1 AND task_id = ?2 AND attempt <= ?3`

// bumpCountersSQL adds ?1, ?2 and ?5 to job ?3's completed, failed and
// expected counters, sets its reduce_state to ?4 unless ?4 is empty and
// its started_at to ?6 when ?6 is earlier and its last_finished_at to ?7
// when ?7 is later (or the column is NULL; a NULL argument leaves it),
// and returns its row.
const bumpCountersSQL = `UPDATE jobs
	SET completed_tasks = completed_tasks + ?1, failed_tasks = failed_tasks + ?2, version = version + 1,
	    expected_tasks = expected_tasks + ?5, spawned_tasks = spawned_tasks + ?5,
	    reduce_state = CASE WHEN ?4 = '' THEN reduce_state ELSE ?4 END,
	    started_at = CASE WHEN ?6 IS NOT NULL AND (started_at IS NULL OR ?6 < started_at) THEN ?6 ELSE started_at END,
	    last_finished_at = CASE WHEN ?7 IS NOT NULL AND (last_finished_at IS NULL OR ?7 > last_finished_at) THEN ?7 ELSE last_finished_at END
	WHERE id = ?3 RETURNING ` + jobColumns

// LockOutcomeTasks implements engine.OutcomeTx. Write transactions are
// serialised on the writer connection, so reading is locking here. The
// rows are read job by job, one statement for each job's state and tasks
// (their ids as one JSON array, each found by primary key).
func (t *tx) LockOutcomeTasks(ctx context.Context, refs []store.TaskRef) ([]engine.OutcomeTask, map[string]engine.OutcomeJob, error) {
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
	read, err := t.stmt(ctx, readOutcomeTasksSQL)
	if err != nil {
		return nil, nil, err
	}
	defer read.Close()
	tasks := make([]engine.OutcomeTask, 0, len(refs))
	jobs := make(map[string]engine.OutcomeJob, len(jobIDs))
	for _, id := range jobIDs {
		if tasks, err = appendOutcomeTasks(ctx, read, id, byJob[id], tasks, jobs); err != nil {
			return nil, nil, fmt.Errorf("read tasks of job %q: %w", id, err)
		}
	}
	return tasks, jobs, nil
}

// appendOutcomeTasks appends to tasks the rows of job jobID's tasks ids
// that exist, and sets the job's state in jobs if the job exists, as read
// reads them.
func appendOutcomeTasks(ctx context.Context, read *sql.Stmt, jobID string, ids []int64, tasks []engine.OutcomeTask, jobs map[string]engine.OutcomeJob) ([]engine.OutcomeTask, error) {
	set := make([]byte, 0, 2+8*len(ids))
	set = append(set, '[')
	for i, id := range ids {
		if i > 0 {
			set = append(set, ',')
		}
		set = strconv.AppendInt(set, id, 10)
	}
	set = append(set, ']')
	rows, err := read.QueryContext(ctx, jobID, string(set))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			jobState   string
			reduce     string
			taskID     sql.NullInt64
			state      sql.NullString
			generation sql.NullInt64
			attempts   sql.NullInt64
			worker     sql.NullString
			started    sql.NullInt64
		)
		if err := rows.Scan(&jobState, &reduce, &taskID, &state, &generation, &attempts, &worker, &started); err != nil {
			return nil, err
		}
		jobs[jobID] = engine.OutcomeJob{State: warren.JobState(jobState), ReduceState: reduce}
		if !taskID.Valid {
			continue
		}
		tasks = append(tasks, engine.OutcomeTask{
			TaskRef:    store.TaskRef{JobID: jobID, TaskID: taskID.Int64},
			State:      warren.TaskState(state.String),
			Generation: int(generation.Int64),
			Attempts:   int(attempts.Int64),
			Worker:     worker.String,
			StartedAt:  timeOf(started),
		})
	}
	return tasks, rows.Err()
}

// WriteOutcomes implements engine.OutcomeTx: guarded updates by primary
// key, many rows per statement (writeOutcomesSQL in chunks of
// writeChunks), then the counters, then the attempts (writeAttempts).
func (t *tx) WriteOutcomes(ctx context.Context, writes []engine.TaskWrite, deltas []engine.CounterDelta, attempts []engine.AttemptWrite) (int, []warren.Job, error) {
	written := 0
	args := make([]any, 0, 10*writeChunks[0])
	for len(writes) > 0 {
		n := writeChunks[len(writeChunks)-1]
		for _, c := range writeChunks {
			if c <= len(writes) {
				n = c
				break
			}
		}
		chunk := writes[:n]
		writes = writes[n:]
		args = args[:0]
		for _, w := range chunk {
			var result any // nil []byte would not be NULL to every driver
			if w.Result != nil {
				result = w.Result
			}
			args = append(args, string(w.State), result, w.Error, w.Attempts, w.Worker,
				micros(w.StartedAt), w.FinishedAt.UnixMicro(), w.JobID, w.TaskID, w.Generation)
		}
		st, err := t.stmt(ctx, writeOutcomesQueries[n])
		if err != nil {
			return 0, nil, err
		}
		res, err := st.ExecContext(ctx, args...)
		st.Close()
		if err != nil {
			return 0, nil, fmt.Errorf("tasks %d.. of job %q: %w", chunk[0].TaskID, chunk[0].JobID, err)
		}
		changed, err := res.RowsAffected()
		if err != nil {
			return 0, nil, err
		}
		written += int(changed)
	}
	jobs, err := t.BumpCounters(ctx, deltas)
	if err != nil {
		return 0, nil, err
	}
	if err := t.writeAttempts(ctx, attempts); err != nil {
		return 0, nil, fmt.Errorf("attempts: %w", err)
	}
	return written, jobs, nil
}

// writeAttempts records attempts, many rows per statement
// (writeAttemptsSQL in chunks of writeChunks), then deletes the rows
// their prunes name: only a task past the attempts the store keeps pays
// a statement of its own.
func (t *tx) writeAttempts(ctx context.Context, attempts []engine.AttemptWrite) error {
	args := make([]any, 0, 10*min(len(attempts), writeChunks[0]))
	for rest := attempts; len(rest) > 0; {
		n := writeChunks[len(writeChunks)-1]
		for _, c := range writeChunks {
			if c <= len(rest) {
				n = c
				break
			}
		}
		chunk := rest[:n]
		rest = rest[n:]
		args = args[:0]
		for _, a := range chunk {
			args = append(args, a.JobID, a.TaskID, a.Attempt, a.Generation, string(a.Outcome), a.Worker,
				micros(a.StartedAt), a.FinishedAt.UnixMicro(), a.Error, a.Traceback)
		}
		st, err := t.stmt(ctx, writeAttemptsQueries[n])
		if err != nil {
			return err
		}
		_, err = st.ExecContext(ctx, args...)
		st.Close()
		if err != nil {
			return err
		}
	}
	for _, a := range attempts {
		if a.PruneThrough <= 0 {
			continue
		}
		if _, err := t.tx.ExecContext(ctx, pruneAttemptsSQL, a.JobID, a.TaskID, a.PruneThrough); err != nil {
			return err
		}
	}
	return nil
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
		j, _, err := scanJob(bump.QueryRowContext(ctx, d.Completed, d.Failed, d.JobID, d.ReduceState, d.Expected, micros(d.Started), micros(d.Finished)))
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
		  AND (reduce_state IN ('completed', 'failed') OR (reduce_state = ''
		       AND (completed_tasks + failed_tasks >= expected_tasks OR (fail_fast = 1 AND failed_tasks > 0))))
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
