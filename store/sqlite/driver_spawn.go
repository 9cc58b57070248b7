package sqlite

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/internal/engine"
)

// LockSpawningJobs implements engine.SpawnTx. Write transactions are
// serialised on the writer connection, so reading is locking here: one
// statement reads every job's expected_tasks.
func (t *tx) LockSpawningJobs(ctx context.Context, ids []string) (map[string]int64, error) {
	set, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	rows, err := t.tx.QueryContext(ctx, `SELECT id, expected_tasks FROM jobs WHERE id IN (SELECT value FROM json_each(?))`, string(set))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	last := make(map[string]int64, len(ids))
	for rows.Next() {
		var (
			id string
			n  int64
		)
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		last[id] = n
	}
	return last, rows.Err()
}

// InsertSpawned implements engine.SpawnTx with multi-row INSERTs of
// insertBatch rows, as a created job's tasks are written.
func (t *tx) InsertSpawned(ctx context.Context, tasks []engine.SpawnedTask) error {
	for len(tasks) > 0 {
		chunk := tasks[:min(len(tasks), insertBatch)]
		tasks = tasks[len(chunk):]
		args := make([]any, 0, insertArgs*len(chunk))
		for _, c := range chunk {
			args = append(args, c.JobID, c.TaskID, c.Payload)
		}
		if _, err := t.tx.ExecContext(ctx, insertTasksSQL(len(chunk)), args...); err != nil {
			return fmt.Errorf("tasks %d.. of job %q: %w", chunk[0].TaskID, chunk[0].JobID, err)
		}
	}
	return nil
}

// ReadSpawnParts implements engine.SpawnPartTx: one statement per run,
// through the primary key.
func (t *tx) ReadSpawnParts(ctx context.Context, keys []engine.SpawnRunKey) ([]engine.StagedPart, error) {
	var parts []engine.StagedPart
	for _, k := range keys {
		rows, err := t.tx.QueryContext(ctx, `SELECT part, parts, spawn, head FROM spawn_parts
			WHERE job_id = ? AND task_id = ? AND generation = ? AND run = ?`, k.JobID, k.TaskID, k.Generation, k.Run)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			p := engine.StagedPart{SpawnRunKey: k}
			if err := rows.Scan(&p.Part, &p.Parts, &p.Spawn, &p.Head); err != nil {
				rows.Close()
				return nil, err
			}
			parts = append(parts, p)
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return parts, nil
}

// StageSpawnParts implements engine.SpawnPartTx: one insert per part.
func (t *tx) StageSpawnParts(ctx context.Context, parts []engine.StagedPart) error {
	for _, p := range parts {
		var head any // nil []byte would not be NULL to every driver
		if p.Head != nil {
			head = p.Head
		}
		if _, err := t.tx.ExecContext(ctx, `INSERT INTO spawn_parts (job_id, task_id, generation, run, part, parts, spawn, head)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
			p.JobID, p.TaskID, p.Generation, p.Run, p.Part, p.Parts, p.Spawn, head); err != nil {
			return fmt.Errorf("part %d of task %d of job %q: %w", p.Part, p.TaskID, p.JobID, err)
		}
	}
	return nil
}

// DeleteSpawnParts implements engine.SpawnPartTx: one delete per task,
// through the primary key's prefix.
func (t *tx) DeleteSpawnParts(ctx context.Context, tasks []store.TaskRef) error {
	for _, r := range tasks {
		if _, err := t.tx.ExecContext(ctx, `DELETE FROM spawn_parts WHERE job_id = ? AND task_id = ?`, r.JobID, r.TaskID); err != nil {
			return fmt.Errorf("task %d of job %q: %w", r.TaskID, r.JobID, err)
		}
	}
	return nil
}
