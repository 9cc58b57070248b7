package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
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

// ReadSpawnParts implements engine.SpawnPartTx in one statement.
func (t *tx) ReadSpawnParts(ctx context.Context, keys []engine.SpawnRunKey) ([]engine.StagedPart, error) {
	n := len(keys)
	jobIDs, runs, taskIDs, gens := make([]string, n), make([]string, n), make([]int64, n), make([]int32, n)
	for i, k := range keys {
		jobIDs[i], taskIDs[i], gens[i], runs[i] = k.JobID, k.TaskID, int32(k.Generation), k.Run
	}
	rows, err := t.tx.Query(ctx, `SELECT p.job_id, p.task_id, p.generation, p.run, p.part, p.parts, p.spawn, p.head
		FROM spawn_parts p JOIN unnest($1::text[], $2::bigint[], $3::integer[], $4::text[]) AS k(job_id, task_id, generation, run)
		  ON p.job_id = k.job_id AND p.task_id = k.task_id AND p.generation = k.generation AND p.run = k.run`,
		jobIDs, taskIDs, gens, runs)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (engine.StagedPart, error) {
		var p engine.StagedPart
		err := row.Scan(&p.JobID, &p.TaskID, &p.Generation, &p.Run, &p.Part, &p.Parts, &p.Spawn, &p.Head)
		return p, err
	})
}

// StageSpawnParts implements engine.SpawnPartTx in one statement.
func (t *tx) StageSpawnParts(ctx context.Context, parts []engine.StagedPart) error {
	n := len(parts)
	jobIDs, runs, taskIDs := make([]string, n), make([]string, n), make([]int64, n)
	gens, nums, totals := make([]int32, n), make([]int32, n), make([]int32, n)
	spawns, heads := make([][]byte, n), make([][]byte, n)
	for i, p := range parts {
		jobIDs[i], taskIDs[i], gens[i], runs[i] = p.JobID, p.TaskID, int32(p.Generation), p.Run
		nums[i], totals[i], spawns[i], heads[i] = int32(p.Part), int32(p.Parts), p.Spawn, p.Head
	}
	_, err := t.tx.Exec(ctx, `INSERT INTO spawn_parts (job_id, task_id, generation, run, part, parts, spawn, head)
		SELECT * FROM unnest($1::text[], $2::bigint[], $3::integer[], $4::text[], $5::integer[], $6::integer[], $7::bytea[], $8::bytea[])
		ON CONFLICT DO NOTHING`, jobIDs, taskIDs, gens, runs, nums, totals, spawns, heads)
	return err
}

// DeleteSpawnParts implements engine.SpawnPartTx in one statement.
func (t *tx) DeleteSpawnParts(ctx context.Context, tasks []store.TaskRef) error {
	jobIDs, taskIDs := splitRefs(tasks)
	_, err := t.tx.Exec(ctx, `DELETE FROM spawn_parts p USING unnest($1::text[], $2::bigint[]) AS r(job_id, task_id)
		WHERE p.job_id = r.job_id AND p.task_id = r.task_id`, jobIDs, taskIDs)
	return err
}
