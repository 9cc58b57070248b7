package sqlite

import (
	"context"
	"encoding/json"
	"fmt"

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
