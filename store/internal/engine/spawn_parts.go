package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// SpawnPartTx holds the primitives of spawns too large for one message
// (store.Outcome.SpawnParts), used by ApplyOutcomes only for a batch that
// holds spawn parts.
type SpawnPartTx interface {
	// ReadSpawnParts returns the staged parts of the runs keys names.
	ReadSpawnParts(ctx context.Context, keys []SpawnRunKey) ([]StagedPart, error)
	// StageSpawnParts writes parts, leaving any already staged as it is.
	StageSpawnParts(ctx context.Context, parts []StagedPart) error
	// DeleteSpawnParts deletes every staged part of tasks, of any run and
	// generation.
	DeleteSpawnParts(ctx context.Context, tasks []store.TaskRef) error
}

// SpawnRunKey names one run's spawn parts: its task, the generation the
// task was at, and the run's own id.
type SpawnRunKey struct {
	store.TaskRef
	Generation int
	Run        string
}

// StagedPart is one staged part of a run's spawn.
type StagedPart struct {
	SpawnRunKey
	Part, Parts int
	// Spawn is the part's payloads, as one JSON array of base64 strings
	// (any bytes: a payload that is not JSON fails its run only once it
	// is assembled, as refuseSpawn says).
	Spawn []byte
	// Head is the run's outcome, on its last part only (nil on the
	// others), as partHead encodes it.
	Head []byte
}

// partHead is what the last part of a run holds of its outcome, besides
// its ids and its part of the spawn.
type partHead struct {
	Result       json.RawMessage `json:"result,omitempty"`
	Attempts     int             `json:"attempts,omitempty"`
	Worker       string          `json:"worker,omitempty"`
	StartedAt    *time.Time      `json:"started_at,omitempty"`
	FinishedAt   *time.Time      `json:"finished_at,omitempty"`
	MaxJobTasks  int64           `json:"max_job_tasks,omitempty"`
	MaxTaskBytes int64           `json:"max_task_bytes,omitempty"`
}

// What judgeOutcomes does with an outcome that assembleParts took as a
// spawn part (skip).
const (
	partJudged    = iota // judged as any outcome: not a part, or a part of a task not open at its generation
	partStaged           // staged: its run's outcome is not complete yet
	partDuplicate        // a part already staged
)

// partPlan is what assembleParts leaves for after the judgement: the new
// parts to stage, and the tasks whose staged parts go once they are
// terminal.
type partPlan struct {
	stage   []StagedPart
	touched []store.TaskRef
}

// stageable returns the run key of spawn part o when its task is open at
// its generation in an open job: only such a part is staged.
func stageable(o store.Outcome, rows map[store.TaskRef]OutcomeTask, jobs map[string]OutcomeJob) (SpawnRunKey, bool) {
	if o.SpawnParts == 0 || o.State != warren.TaskCompleted {
		return SpawnRunKey{}, false
	}
	ref := store.TaskRef{JobID: o.JobID, TaskID: o.TaskID}
	job, jobFound := jobs[o.JobID]
	task, taskFound := rows[ref]
	if !jobFound || !taskFound || job.State.Terminal() || task.State.Terminal() ||
		(o.Generation != 0 && o.Generation != task.Generation) || o.TaskID == warren.ReduceTaskID {
		return SpawnRunKey{}, false
	}
	return SpawnRunKey{TaskRef: ref, Generation: task.Generation, Run: o.SpawnRun}, true
}

// assembleParts returns outcomes with each spawn part that completes its
// run (every part staged before, or in this batch up to it) replaced by
// the run's whole outcome, the other stageable parts marked in skip as
// staged or duplicate, and the plan for the parts. A part that is not
// stageable stays as it is, for judgeOutcomes to judge as any outcome of
// a task that is not open (it is never applied).
func assembleParts(ctx context.Context, tx SpawnPartTx, outcomes []store.Outcome, tasks []OutcomeTask, jobs map[string]OutcomeJob) ([]store.Outcome, []int, *partPlan, error) {
	rows := make(map[store.TaskRef]OutcomeTask, len(tasks))
	for _, t := range tasks {
		rows[t.TaskRef] = t
	}
	var keys []SpawnRunKey
	for _, o := range outcomes {
		if key, ok := stageable(o, rows, jobs); ok && !slices.Contains(keys, key) {
			keys = append(keys, key)
		}
	}
	if len(keys) == 0 {
		return outcomes, nil, nil, nil
	}
	stored, err := tx.ReadSpawnParts(ctx, keys)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read spawn parts: %w", err)
	}
	have := make(map[SpawnRunKey]map[int]StagedPart)
	for _, p := range stored {
		if have[p.SpawnRunKey] == nil {
			have[p.SpawnRunKey] = make(map[int]StagedPart)
		}
		have[p.SpawnRunKey][p.Part] = p
	}
	out := slices.Clone(outcomes)
	skip := make([]int, len(outcomes))
	plan := &partPlan{}
	done := make(map[SpawnRunKey]bool)
	for i, o := range outcomes {
		key, ok := stageable(o, rows, jobs)
		if !ok || done[key] {
			continue
		}
		if !slices.Contains(plan.touched, key.TaskRef) {
			plan.touched = append(plan.touched, key.TaskRef)
		}
		m := have[key]
		if m == nil {
			m = make(map[int]StagedPart)
			have[key] = m
		}
		if _, dup := m[o.SpawnPart]; dup {
			skip[i] = partDuplicate
			continue
		}
		p, err := stagedPart(key, o)
		if err != nil {
			return nil, nil, nil, err
		}
		m[p.Part] = p
		whole, complete, err := assembled(key, m, o.SpawnParts)
		if err != nil {
			return nil, nil, nil, err
		}
		if !complete {
			skip[i] = partStaged
			plan.stage = append(plan.stage, p)
			continue
		}
		out[i], done[key] = whole, true
		plan.stage = slices.DeleteFunc(plan.stage, func(s StagedPart) bool { return s.SpawnRunKey == key })
	}
	return out, skip, plan, nil
}

// stagedPart is spawn part o of run key as it is staged.
func stagedPart(key SpawnRunKey, o store.Outcome) (StagedPart, error) {
	payloads := make([][]byte, len(o.Spawn))
	for i, p := range o.Spawn {
		payloads[i] = p
	}
	raw, err := json.Marshal(payloads)
	if err != nil {
		return StagedPart{}, fmt.Errorf("spawn part of task %d of job %q: %w", key.TaskID, key.JobID, err)
	}
	p := StagedPart{SpawnRunKey: key, Part: o.SpawnPart, Parts: o.SpawnParts, Spawn: raw}
	if o.SpawnPart == o.SpawnParts {
		head, err := json.Marshal(partHead{Result: o.Result, Attempts: o.Attempts, Worker: o.Worker, StartedAt: o.StartedAt,
			FinishedAt: o.FinishedAt, MaxJobTasks: o.MaxJobTasks, MaxTaskBytes: o.MaxTaskBytes})
		if err != nil {
			return StagedPart{}, fmt.Errorf("spawn part of task %d of job %q: %w", key.TaskID, key.JobID, err)
		}
		p.Head = head
	}
	return p, nil
}

// assembled returns the whole outcome of run key from its parts m, when
// m holds every part 1..parts, each of parts parts, the last with its
// head.
func assembled(key SpawnRunKey, m map[int]StagedPart, parts int) (store.Outcome, bool, error) {
	if len(m) != parts {
		return store.Outcome{}, false, nil
	}
	o := store.Outcome{JobID: key.JobID, TaskID: key.TaskID, State: warren.TaskCompleted, Generation: key.Generation}
	for n := 1; n <= parts; n++ {
		p, ok := m[n]
		if !ok || p.Parts != parts {
			return store.Outcome{}, false, nil
		}
		var spawn [][]byte
		if err := json.Unmarshal(p.Spawn, &spawn); err != nil {
			return store.Outcome{}, false, fmt.Errorf("spawn part %d of task %d of job %q: %w", n, key.TaskID, key.JobID, err)
		}
		for _, payload := range spawn {
			o.Spawn = append(o.Spawn, payload)
		}
		if n == parts {
			if p.Head == nil {
				return store.Outcome{}, false, nil
			}
			var h partHead
			if err := json.Unmarshal(p.Head, &h); err != nil {
				return store.Outcome{}, false, fmt.Errorf("spawn part %d of task %d of job %q: %w", n, key.TaskID, key.JobID, err)
			}
			o.Result, o.Attempts, o.Worker, o.StartedAt, o.FinishedAt = h.Result, h.Attempts, h.Worker, h.StartedAt, h.FinishedAt
			o.MaxJobTasks, o.MaxTaskBytes = h.MaxJobTasks, h.MaxTaskBytes
		}
	}
	return o, true, nil
}

// settleParts stages the plan's new parts of tasks that are still open
// after the batch, and deletes every staged part of its tasks that the
// batch made terminal (writes).
func settleParts(ctx context.Context, tx SpawnPartTx, plan *partPlan, writes []TaskWrite) error {
	terminal := make(map[store.TaskRef]bool, len(writes))
	for _, w := range writes {
		terminal[w.TaskRef] = true
	}
	var gone []store.TaskRef
	for _, ref := range plan.touched {
		if terminal[ref] {
			gone = append(gone, ref)
		}
	}
	stage := slices.DeleteFunc(plan.stage, func(p StagedPart) bool { return terminal[p.TaskRef] })
	if len(stage) > 0 {
		if err := tx.StageSpawnParts(ctx, stage); err != nil {
			return fmt.Errorf("stage spawn parts: %w", err)
		}
	}
	if len(gone) > 0 {
		if err := tx.DeleteSpawnParts(ctx, gone); err != nil {
			return fmt.Errorf("delete spawn parts: %w", err)
		}
	}
	return nil
}

// hasSpawnParts reports whether a batch holds a spawn part.
func hasSpawnParts(outcomes []store.Outcome) bool {
	return slices.ContainsFunc(outcomes, func(o store.Outcome) bool { return o.SpawnParts != 0 })
}
