package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store/internal/engine"
)

// LockSpawningJobs implements engine.SpawnTx in one round trip: the job
// rows locked in id order (the package's lock order, after the task rows
// LockOutcomeTasks locked), their expected_tasks read under the locks, so
// that a concurrent spawn into one of them waits and then reads what
// this one wrote.
func (t *tx) LockSpawningJobs(ctx context.Context, ids []string) (map[string]int64, error) {
	rows, err := t.tx.Query(ctx, `SELECT id, expected_tasks FROM jobs WHERE id = ANY($1) ORDER BY id FOR UPDATE`, ids)
	if err != nil {
		return nil, err
	}
	last := make(map[string]int64, len(ids))
	var (
		id string
		n  int64
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &n}, func() error {
		last[id] = n
		return nil
	})
	return last, err
}

// InsertSpawned implements engine.SpawnTx in one set-wise statement.
func (t *tx) InsertSpawned(ctx context.Context, tasks []engine.SpawnedTask) error {
	jobIDs, taskIDs, payloads := make([]string, len(tasks)), make([]int64, len(tasks)), make([][]byte, len(tasks))
	for i, c := range tasks {
		jobIDs[i], taskIDs[i], payloads[i] = c.JobID, c.TaskID, c.Payload
	}
	_, err := t.tx.Exec(ctx, `INSERT INTO tasks (job_id, task_id, state, payload)
		SELECT job_id, task_id, $4, payload FROM unnest($1::text[], $2::bigint[], $3::bytea[]) AS c(job_id, task_id, payload)`,
		jobIDs, taskIDs, payloads, string(warren.TaskPending))
	if err != nil {
		return fmt.Errorf("write %d spawned tasks: %w", len(tasks), err)
	}
	return nil
}
