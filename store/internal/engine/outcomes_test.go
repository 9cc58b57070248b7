package engine

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// outcomeWrite's defaults, including the one no store can show today: a
// start time already on the row (every path that requeues a task clears
// it) is kept by an outcome that reports none.
func TestOutcomeWriteDefaults(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 2, 3, 4, 5, 6000, time.UTC)
	stored, reported := now.Add(-time.Hour), now.Add(-time.Minute)
	row := OutcomeTask{TaskRef: store.TaskRef{JobID: "j", TaskID: 3}, State: warren.TaskQueued, Generation: 2,
		Attempts: 4, Worker: "w-stored", StartedAt: &stored}

	unknown := outcomeWrite(store.Outcome{JobID: "j", TaskID: 3, State: warren.TaskFailed, Error: "boom"}, row, now)
	require.Equal(t, TaskWrite{TaskRef: row.TaskRef, Generation: 2, State: warren.TaskFailed, Error: "boom",
		Attempts: 4, Worker: "w-stored", StartedAt: &stored, FinishedAt: now}, unknown, "what the outcome does not know is kept")

	fresh := row
	fresh.Attempts, fresh.StartedAt = 0, nil
	require.Equal(t, 1, outcomeWrite(store.Outcome{State: warren.TaskCompleted}, fresh, now).Attempts,
		"a task that produced an outcome ran at least once")
	require.Nil(t, outcomeWrite(store.Outcome{State: warren.TaskCompleted}, fresh, now).StartedAt)

	known := outcomeWrite(store.Outcome{JobID: "j", TaskID: 3, State: warren.TaskCompleted, Result: []byte(`1`),
		Attempts: 2, Worker: "w-new", StartedAt: &reported, FinishedAt: &reported, Generation: 2}, row, now)
	require.Equal(t, TaskWrite{TaskRef: row.TaskRef, Generation: 2, State: warren.TaskCompleted, Result: []byte(`1`),
		Attempts: 2, Worker: "w-new", StartedAt: &reported, FinishedAt: reported}, known, "what the outcome knows replaces the row's")

	require.Nil(t, outcomeWrite(store.Outcome{State: warren.TaskCompleted, Result: []byte{}}, row, now).Result,
		"an empty result stores none")
}

// The judgement's precedence: Unknown before Closed before Duplicate, and
// an outcome sees what the earlier ones of its batch applied.
func TestJudgeOutcomes(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	tasks := []OutcomeTask{
		{TaskRef: store.TaskRef{JobID: "a", TaskID: 1}, State: warren.TaskQueued, Generation: 2},
		{TaskRef: store.TaskRef{JobID: "a", TaskID: 2}, State: warren.TaskCompleted, Generation: 1},
		{TaskRef: store.TaskRef{JobID: "b", TaskID: 1}, State: warren.TaskPending, Generation: 1},
		{TaskRef: store.TaskRef{JobID: "closed", TaskID: 1}, State: warren.TaskCancelled, Generation: 1},
		{TaskRef: store.TaskRef{JobID: "deleted", TaskID: 1}, State: warren.TaskQueued, Generation: 1},
	}
	jobs := map[string]OutcomeJob{"a": {State: warren.JobRunning}, "b": {State: warren.JobPending}, "closed": {State: warren.JobCancelled}}
	outcome := func(job string, task int64, state warren.TaskState, generation int) store.Outcome {
		return store.Outcome{JobID: job, TaskID: task, State: state, Generation: generation}
	}
	j := judgeOutcomes([]store.Outcome{
		outcome("a", 1, warren.TaskFailed, 1),       // 0: an older generation: Duplicate
		outcome("closed", 9, warren.TaskFailed, 0),  // 1: no such task: Unknown, though the job is closed
		outcome("closed", 1, warren.TaskFailed, 0),  // 2: Closed
		outcome("b", 1, warren.TaskFailed, 0),       // 3: Applied
		outcome("a", 1, warren.TaskCompleted, 2),    // 4: Applied
		outcome("a", 1, warren.TaskCompleted, 0),    // 5: terminal by 4: Duplicate
		outcome("a", 2, warren.TaskCompleted, 1),    // 6: terminal: Duplicate
		outcome("deleted", 1, warren.TaskFailed, 1), // 7: a task row without its job: Unknown
	}, nil, tasks, jobs, nil, now)

	require.Equal(t, store.ApplyReport{Applied: 2, AppliedFailed: 1, Duplicates: 3, Closed: 1, Unknown: []int{1, 7}}, j.report)
	require.Equal(t, []CounterDelta{{JobID: "a", Completed: 1, Finished: &now}, {JobID: "b", Failed: 1, Finished: &now}}, j.deltas, "in job id order")
	require.Len(t, j.writes, 2)
	require.Equal(t, store.TaskRef{JobID: "b", TaskID: 1}, j.writes[0].TaskRef)
	require.Equal(t, store.TaskRef{JobID: "a", TaskID: 1}, j.writes[1].TaskRef)
	require.Equal(t, 2, j.writes[1].Generation, "guarded at the generation read")
	require.Equal(t, warren.TaskQueued, tasks[0].State, "the caller's rows are not changed")
}

func TestBecameReady(t *testing.T) {
	t.Parallel()
	job := func(state warren.JobState, completed, failed int64) warren.Job {
		return warren.Job{State: state, Policy: warren.Policy{FailFast: true},
			ExpectedTasks: 4, CompletedTasks: completed, FailedTasks: failed}
	}
	require.True(t, becameReady(job(warren.JobRunning, 1, 1), CounterDelta{Failed: 1}), "the first failure of a fail-fast job")
	require.False(t, becameReady(job(warren.JobRunning, 1, 2), CounterDelta{Failed: 1}), "it was ready before")
	require.True(t, becameReady(job(warren.JobRunning, 4, 0), CounterDelta{Completed: 2}), "the last tasks finished")
	require.False(t, becameReady(job(warren.JobRunning, 3, 0), CounterDelta{Completed: 1}), "tasks are left")
	require.False(t, becameReady(job(warren.JobFailed, 1, 1), CounterDelta{Failed: 1}), "a closed job is never listed")
	reduced := job(warren.JobRunning, 4, 0)
	reduced.ReduceState = warren.ReduceCompleted
	require.True(t, becameReady(reduced, CounterDelta{ReduceState: warren.ReduceCompleted}), "the reduce task's outcome")
}

// The reduce task's outcome is judged as any, but only while its job
// reduces, and moves no counter: it sets the job's reduce state.
func TestJudgeReduceOutcomes(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	tasks := []OutcomeTask{
		{TaskRef: store.TaskRef{JobID: "r", TaskID: 0}, State: warren.TaskQueued, Generation: 2},
		{TaskRef: store.TaskRef{JobID: "idle", TaskID: 0}, State: warren.TaskQueued, Generation: 1},
	}
	jobs := map[string]OutcomeJob{"r": {State: warren.JobRunning, ReduceState: warren.ReduceRunning},
		"idle": {State: warren.JobRunning}}
	outcome := func(job string, state warren.TaskState, generation int) store.Outcome {
		return store.Outcome{JobID: job, TaskID: 0, State: state, Generation: generation}
	}
	j := judgeOutcomes([]store.Outcome{
		outcome("r", warren.TaskCompleted, 1),    // 0: an older generation: Duplicate
		outcome("idle", warren.TaskCompleted, 1), // 1: the job is not reducing: Duplicate
		outcome("r", warren.TaskFailed, 2),       // 2: Applied
		outcome("r", warren.TaskCompleted, 2),    // 3: terminal by 2: Duplicate
	}, nil, tasks, jobs, nil, now)
	require.Equal(t, store.ApplyReport{Applied: 1, AppliedFailed: 1, Duplicates: 3}, j.report)
	require.Equal(t, []CounterDelta{{JobID: "r", ReduceState: warren.ReduceFailed, Finished: &now}}, j.deltas, "no counter moves")
}

// A job's delta carries the earliest start and the latest finish of its
// applied outcomes (a start the row held counts: the outcome kept it),
// and none of an outcome that was not applied.
func TestJudgeOutcomesStartAndFinish(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(s int) *time.Time { tm := now.Add(time.Duration(s) * time.Second); return &tm }
	tasks := []OutcomeTask{
		{TaskRef: store.TaskRef{JobID: "a", TaskID: 1}, State: warren.TaskQueued, Generation: 1},
		{TaskRef: store.TaskRef{JobID: "a", TaskID: 2}, State: warren.TaskQueued, Generation: 1, StartedAt: at(-50)},
		{TaskRef: store.TaskRef{JobID: "a", TaskID: 3}, State: warren.TaskCompleted, Generation: 1},
		{TaskRef: store.TaskRef{JobID: "b", TaskID: 1}, State: warren.TaskQueued, Generation: 1},
	}
	jobs := map[string]OutcomeJob{"a": {State: warren.JobRunning}, "b": {State: warren.JobRunning}}
	j := judgeOutcomes([]store.Outcome{
		{JobID: "a", TaskID: 1, State: warren.TaskCompleted, StartedAt: at(-30), FinishedAt: at(-10)},
		{JobID: "a", TaskID: 2, State: warren.TaskCompleted, FinishedAt: at(-20)},                   // the row's start, -50
		{JobID: "a", TaskID: 3, State: warren.TaskCompleted, StartedAt: at(-90), FinishedAt: at(5)}, // a duplicate
		{JobID: "b", TaskID: 1, State: warren.TaskFailed, Error: "dead"},                            // no start; finished now
	}, nil, tasks, jobs, nil, now)
	require.Equal(t, []CounterDelta{
		{JobID: "a", Completed: 2, Started: at(-50), Finished: at(-10)},
		{JobID: "b", Failed: 1, Finished: &now},
	}, j.deltas)
}

func TestValidateOutcomes(t *testing.T) {
	t.Parallel()
	ok := []store.Outcome{
		{JobID: "j", TaskID: 1, State: warren.TaskCompleted},
		{JobID: "j", TaskID: 2, State: warren.TaskFailed},
	}
	require.NoError(t, validateOutcomes(ok))
	require.NoError(t, validateOutcomes(nil))
	for _, state := range []warren.TaskState{warren.TaskPending, warren.TaskQueued, warren.TaskCancelled, ""} {
		bad := append(ok, store.Outcome{JobID: "j", TaskID: 3, State: state})
		err := validateOutcomes(bad)
		require.Error(t, err, "state %q", state)
		require.ErrorContains(t, err, "outcome 2 (job \"j\" task 3)", "the error names the outcome")
	}
}

func TestSanitizeOutcomes(t *testing.T) {
	t.Parallel()
	clean := []store.Outcome{{Error: "boom", Worker: "w1"}, {Worker: "w2"}}
	got := sanitizeOutcomes(clean)
	require.Equal(t, clean, got)
	require.Same(t, &clean[0], &got[0], "clean outcomes are not copied")

	dirty := []store.Outcome{{Error: "boom", Worker: "w1"}, {Error: "a\x00b", Worker: "w\xff", Result: []byte(`"\u0000"`)}}
	got = sanitizeOutcomes(dirty)
	require.Equal(t, []store.Outcome{{Error: "boom", Worker: "w1"}, {Error: "a\uFFFDb", Worker: "w\uFFFD", Result: []byte(`"\u0000"`)}}, got)
	require.Equal(t, "a\x00b", dirty[1].Error, "the caller's outcomes are left as they are")
}

func TestSpawnsAfterTheLastTaskOrAreRefused(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	tasks := []OutcomeTask{
		{TaskRef: store.TaskRef{JobID: "a", TaskID: 1}, State: warren.TaskQueued, Generation: 1},
		{TaskRef: store.TaskRef{JobID: "a", TaskID: 2}, State: warren.TaskQueued, Generation: 1},
		{TaskRef: store.TaskRef{JobID: "a", TaskID: 3}, State: warren.TaskQueued, Generation: 1},
		{TaskRef: store.TaskRef{JobID: "b", TaskID: 1}, State: warren.TaskQueued, Generation: 1},
	}
	jobs := map[string]OutcomeJob{"a": {State: warren.JobRunning}, "b": {State: warren.JobCompleted}}
	spawn := func(o store.Outcome, n int) store.Outcome {
		for i := range n {
			o.Spawn = append(o.Spawn, []byte(strconv.Itoa(i)))
		}
		return o
	}
	outcomes := []store.Outcome{
		spawn(store.Outcome{JobID: "a", TaskID: 2, State: warren.TaskCompleted}, 2),
		spawn(store.Outcome{JobID: "a", TaskID: 1, State: warren.TaskFailed, Error: "boom"}, 5),
		spawn(store.Outcome{JobID: "a", TaskID: 3, State: warren.TaskCompleted, MaxJobTasks: 6}, 2),
		spawn(store.Outcome{JobID: "b", TaskID: 1, State: warren.TaskCompleted}, 1),
	}
	require.Equal(t, []string{"a"}, spawningJobs(outcomes, jobs), "a closed job's row is not locked")
	j := judgeOutcomes(outcomes, nil, tasks, jobs, map[string]int64{"a": 3}, now)
	var ids []int64
	for _, c := range j.children {
		ids = append(ids, c.TaskID)
	}
	require.Equal(t, []int64{4, 5}, ids, "after the last task; a failed outcome's spawn is ignored")
	require.Equal(t, warren.TaskFailed, j.writes[2].State, "5 + 2 tasks are over the limit of 6")
	require.Contains(t, j.writes[2].Error, "2 more tasks would take the job to 7 tasks, over the limit of 6 tasks per job")
	require.Equal(t, []CounterDelta{{JobID: "a", Completed: 1, Failed: 2, Expected: 2, Finished: &now}}, j.deltas)
	require.Equal(t, store.ApplyReport{Applied: 3, AppliedFailed: 2, Closed: 1, Spawned: 2, SpawnedJobs: []string{"a"}, SpawnRefused: 1}, j.report)

	// A job whose last task spawns is not ready; its children's outcomes make it so.
	job := warren.Job{ID: "a", State: warren.JobRunning, ExpectedTasks: 5, CompletedTasks: 3}
	require.False(t, becameReady(job, CounterDelta{JobID: "a", Completed: 1, Expected: 2}))
	job.CompletedTasks = 5
	require.True(t, becameReady(job, CounterDelta{JobID: "a", Completed: 2}))
}
