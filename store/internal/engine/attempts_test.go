package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

func TestAttemptTextIsCutAtCharacters(t *testing.T) {
	t.Parallel()
	require.Equal(t, "ab", headBytes("abc", 2))
	require.Equal(t, "a", headBytes("aé", 2), "é's two bytes do not fit after a")
	require.Equal(t, "aé", headBytes("aé", 3))
	require.Equal(t, "bc", tailBytes("abc", 2))
	require.Equal(t, "b", tailBytes("éb", 2), "the tail starts at a character")
	require.Equal(t, "éb", tailBytes("éb", 3))

	a := bounded(AttemptWrite{Attempt: 25, Error: strings.Repeat("e", store.MaxAttemptErrorBytes+1),
		Traceback: strings.Repeat("t", store.MaxTracebackBytes+1)}, 0)
	require.Equal(t, 25-store.DefaultKeepAttempts, a.PruneThrough)
	require.Len(t, a.Error, store.MaxAttemptErrorBytes)
	require.Len(t, a.Traceback, store.MaxTracebackBytes)
	require.Zero(t, bounded(AttemptWrite{Attempt: 3}, 3).PruneThrough, "within the bound: no prune")
}

func TestDistinctAttemptsKeepsTheLatestGeneration(t *testing.T) {
	t.Parallel()
	ref := store.TaskRef{JobID: "j", TaskID: 1}
	got := distinctAttempts([]AttemptWrite{
		{TaskRef: ref, Attempt: 1, Generation: 1, Error: "first"},
		{TaskRef: ref, Attempt: 2, Generation: 1},
		{TaskRef: ref, Attempt: 1, Generation: 1, Error: "repeat"},
		{TaskRef: ref, Attempt: 1, Generation: 2, Error: "later"},
	})
	require.Len(t, got, 2)
	require.Equal(t, "later", got[0].Error)
	require.Equal(t, 2, got[1].Attempt)
}

// A map task's completing first run has no row: its task row is the
// attempt, which the reads give; every other run has a row.
func TestFirstRunOfACompletedTask(t *testing.T) {
	t.Parallel()
	require.False(t, keepsRow(TaskWrite{TaskRef: store.TaskRef{TaskID: 1}, State: warren.TaskCompleted, Attempts: 1}))
	require.True(t, keepsRow(TaskWrite{TaskRef: store.TaskRef{TaskID: 1}, State: warren.TaskCompleted, Attempts: 2}))
	require.True(t, keepsRow(TaskWrite{TaskRef: store.TaskRef{TaskID: 1}, State: warren.TaskFailed, Attempts: 1}))
	require.True(t, keepsRow(TaskWrite{TaskRef: store.TaskRef{TaskID: warren.ReduceTaskID}, State: warren.TaskCompleted, Attempts: 1}))

	started, finished := time.Unix(100, 0).UTC(), time.Unix(101, 0).UTC()
	done := warren.TaskRecord{TaskID: 3, State: warren.TaskCompleted, Attempts: 1, Generation: 1, Worker: "w", StartedAt: &started, FinishedAt: &finished}
	require.Equal(t, []warren.TaskAttempt{{Attempt: 1, Generation: 1, Outcome: warren.AttemptCompleted, Worker: "w", StartedAt: &started, FinishedAt: finished}},
		WithFirstRun(done, nil))
	kept := []warren.TaskAttempt{{Attempt: 1, Outcome: warren.AttemptCompleted, Worker: "row"}}
	require.Equal(t, kept, WithFirstRun(done, kept), "a row already there is the attempt")
	open := done
	open.State, open.FinishedAt = warren.TaskQueued, nil
	require.Empty(t, WithFirstRun(open, nil))
}
