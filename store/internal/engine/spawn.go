package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// SpawnTx holds the primitives that add spawned tasks to their jobs
// (store.Outcome.Spawn), used by ApplyOutcomes only for a batch that
// spawns: a batch without a spawn costs what it cost before.
type SpawnTx interface {
	// LockSpawningJobs locks the job rows of ids (distinct, any order) in
	// job id order, PostgreSQL's lock order for job rows, and reads their
	// expected_tasks under those locks, so that two transactions spawning
	// into one job never compute the same next task id. It is called
	// after LockOutcomeTasks: task rows first, then job rows. A job that
	// does not exist is absent from what it returns.
	LockSpawningJobs(ctx context.Context, ids []string) (map[string]int64, error)
	// InsertSpawned writes tasks as new pending task rows (generation 1,
	// no attempt yet), set-wise. Their ids are the engine's choice and
	// are free: a job's task ids are 1..expected_tasks.
	InsertSpawned(ctx context.Context, tasks []SpawnedTask) error
}

// SpawnedTask is a task row a spawn adds.
type SpawnedTask struct {
	store.TaskRef
	// Payload is the task's payload, JSON, stored byte for byte.
	Payload []byte
}

// spawns reports whether o carries a spawn the judgement must weigh: a
// completed outcome's. A failed outcome's spawn is ignored.
func spawns(o store.Outcome) bool {
	return o.State == warren.TaskCompleted && len(o.Spawn) > 0
}

// spawningJobs lists, once each in job id order, the open jobs (as
// jobs, LockOutcomeTasks's read, says) of the outcomes of a batch that
// spawn: a closed job's outcomes add nothing, and its row is not locked.
func spawningJobs(outcomes []store.Outcome, jobs map[string]OutcomeJob) []string {
	var ids []string
	for _, o := range outcomes {
		if job, ok := jobs[o.JobID]; ok && !job.State.Terminal() && spawns(o) && o.TaskID != warren.ReduceTaskID {
			ids = append(ids, o.JobID)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// refuseSpawn returns why the spawn of applied completed outcome o, of a
// job whose last task id is now last, must not be recorded, or "" when
// it may: a reduce task may not spawn (its job's map tasks are all
// finished, and its result is the job's); every payload must be JSON of
// at most o.MaxTaskBytes; the job may not grow beyond o.MaxJobTasks.
func refuseSpawn(o store.Outcome, last int64) string {
	if o.TaskID == warren.ReduceTaskID {
		return "spawn refused: a reduce task cannot spawn tasks"
	}
	for i, p := range o.Spawn {
		if len(p) == 0 {
			continue // stored as JSON null, as a submitted task without a payload is
		}
		if o.MaxTaskBytes > 0 && int64(len(p)) > o.MaxTaskBytes {
			return fmt.Sprintf("spawn refused: spawned task %d's payload is %d bytes, over the limit of %d bytes per task", i, len(p), o.MaxTaskBytes)
		}
		if !json.Valid(p) {
			return fmt.Sprintf("spawn refused: spawned task %d's payload is not JSON", i)
		}
	}
	n := int64(len(o.Spawn))
	if o.MaxJobTasks > 0 && last+n > o.MaxJobTasks {
		return fmt.Sprintf("spawn refused: %d more tasks would take the job to %d tasks, over the limit of %d tasks per job", n, last+n, o.MaxJobTasks)
	}
	return ""
}

// spawnedTasks are the rows of the spawn of o, with task ids last+1 ...
func spawnedTasks(children []SpawnedTask, o store.Outcome, last int64) []SpawnedTask {
	for i, p := range o.Spawn {
		if len(p) == 0 {
			p = jsonNull
		}
		children = append(children, SpawnedTask{TaskRef: store.TaskRef{JobID: o.JobID, TaskID: last + 1 + int64(i)}, Payload: p})
	}
	return children
}
