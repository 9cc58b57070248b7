package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

func TestReadyToClose(t *testing.T) {
	t.Parallel()
	failFast := warren.Policy{FailFast: true, ToleratedFailures: 1, ToleratedFailurePercent: 50}
	tests := []struct {
		name                        string
		policy                      warren.Policy
		expected, completed, failed int64
		want                        bool
	}{
		{"every task finished", warren.Policy{}, 3, 2, 1, true},
		{"tasks left", warren.Policy{}, 3, 1, 1, false},
		{"failures over tolerance wait without fail-fast", warren.Policy{}, 3, 0, 2, false},
		{"fail-fast within tolerance waits", failFast, 4, 0, 1, false},
		{"fail-fast over the count", failFast, 4, 0, 2, true},
		{"fail-fast over the share", warren.Policy{FailFast: true, ToleratedFailures: 10, ToleratedFailurePercent: 20}, 5, 0, 2, true},
		{"fail-fast without failures waits", failFast, 4, 3, 0, false},
		{"no tasks", warren.Policy{}, 0, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			j := warren.Job{State: warren.JobRunning, Policy: tt.policy,
				ExpectedTasks: tt.expected, CompletedTasks: tt.completed, FailedTasks: tt.failed}
			require.Equal(t, tt.want, store.ReadyToClose(j))
		})
	}
}

func TestBecameReady(t *testing.T) {
	t.Parallel()
	job := func(state warren.JobState, completed, failed int64) warren.Job {
		return warren.Job{State: state, Policy: warren.Policy{FailFast: true},
			ExpectedTasks: 4, CompletedTasks: completed, FailedTasks: failed}
	}
	require.True(t, store.BecameReady(job(warren.JobRunning, 1, 1), 0, 1), "the first failure of a fail-fast job")
	require.False(t, store.BecameReady(job(warren.JobRunning, 1, 2), 0, 1), "it was ready before")
	require.True(t, store.BecameReady(job(warren.JobRunning, 4, 0), 2, 0), "the last tasks finished")
	require.False(t, store.BecameReady(job(warren.JobRunning, 3, 0), 1, 0), "tasks are left")
	require.False(t, store.BecameReady(job(warren.JobFailed, 1, 1), 0, 1), "a closed job is never listed")
}

func TestSplitLost(t *testing.T) {
	t.Parallel()
	ref := func(id int64) store.TaskRef { return store.TaskRef{JobID: "j", TaskID: id} }
	requeue, fail := store.SplitLost([]store.StaleTask{
		{TaskRef: ref(1), Attempts: 0, MaxRetries: 3},
		{TaskRef: ref(2), Attempts: 2, MaxRetries: 3},
		{TaskRef: ref(3), Attempts: 3, MaxRetries: 3},
		{TaskRef: ref(4), Attempts: 0, MaxRetries: 0},
		{TaskRef: ref(5), Attempts: 0, MaxRetries: 1},
	})
	require.Equal(t, []store.TaskRef{ref(1), ref(2), ref(5)}, requeue, "the lost run counts: attempts+1 <= max_retries")
	require.Equal(t, []store.TaskRef{ref(3), ref(4)}, fail)
}

func TestPageSize(t *testing.T) {
	t.Parallel()
	require.Equal(t, store.DefaultPageSize, store.PageSize(0))
	require.Equal(t, store.DefaultPageSize, store.PageSize(-1))
	require.Equal(t, 7, store.PageSize(7))
}

func TestValidateOutcomes(t *testing.T) {
	t.Parallel()
	ok := []store.Outcome{
		{JobID: "j", TaskID: 1, State: warren.TaskCompleted},
		{JobID: "j", TaskID: 2, State: warren.TaskFailed},
	}
	require.NoError(t, store.ValidateOutcomes(ok))
	require.NoError(t, store.ValidateOutcomes(nil))
	for _, state := range []warren.TaskState{warren.TaskPending, warren.TaskQueued, warren.TaskCancelled, ""} {
		bad := append(ok, store.Outcome{JobID: "j", TaskID: 3, State: state})
		err := store.ValidateOutcomes(bad)
		require.Error(t, err, "state %q", state)
		require.ErrorContains(t, err, "outcome 2 (job \"j\" task 3)", "the error names the outcome")
	}
}

func TestValidateNewJob(t *testing.T) {
	t.Parallel()
	require.NoError(t, store.ValidateNewJob(store.NewJob{Type: "t"}))
	require.NoError(t, store.ValidateNewJob(store.NewJob{Type: "t", Policy: warren.Policy{MaxRetries: 3, BatchSize: warren.MaxBatchSize}}))
	bad := warren.Policy{TaskTimeout: time.Millisecond}
	err := store.ValidateNewJob(store.NewJob{Type: "t", Policy: bad})
	require.Error(t, err)
	require.ErrorContains(t, err, bad.Validate().Error(), "the error says what is wrong with the policy")
}

func TestValidateFinishState(t *testing.T) {
	t.Parallel()
	require.NoError(t, store.ValidateFinishState(warren.JobCompleted))
	require.NoError(t, store.ValidateFinishState(warren.JobFailed))
	for _, state := range []warren.JobState{warren.JobCancelled, warren.JobPending, warren.JobRunning, "", "done"} {
		err := store.ValidateFinishState(state)
		require.Error(t, err, "state %q", state)
		require.ErrorContains(t, err, fmt.Sprintf("%q", state), "the error names the state")
	}
}

func TestReopenable(t *testing.T) {
	t.Parallel()
	for state, want := range map[warren.JobState]bool{
		warren.JobFailed:    true,
		warren.JobCompleted: true,
		warren.JobCancelled: false,
		warren.JobPending:   false,
		warren.JobRunning:   false,
	} {
		require.Equal(t, want, store.Reopenable(state), "state %s", state)
	}
}

func TestResultLocationIsTheServersResultPath(t *testing.T) {
	t.Parallel()
	require.Equal(t, "/v1/jobs/01ABC/result", store.ResultLocation("01ABC"))
}

func TestStoredText(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"", ""},
		{"plain", "plain"},
		{"naïve ✓", "naïve ✓"},
		{"nul\x00byte", "nul\uFFFDbyte"},
		{"\x00\x00", "\uFFFD\uFFFD"},
		{"bad \xff\xfe run", "bad \uFFFD run"},
		{"cut \xc3", "cut \uFFFD"},
		{"both \x00\xff", "both \uFFFD\uFFFD"},
		{"kept \uFFFD", "kept \uFFFD"},
	} {
		got := store.StoredText(tt.in)
		require.Equal(t, tt.want, got, "StoredText(%q)", tt.in)
		require.Equal(t, got, store.StoredText(got), "StoredText(%q) is stable", tt.in)
	}
}

func TestSanitizeOutcomes(t *testing.T) {
	t.Parallel()
	clean := []store.Outcome{{Error: "boom", Worker: "w1"}, {Worker: "w2"}}
	got := store.SanitizeOutcomes(clean)
	require.Equal(t, clean, got)
	require.Same(t, &clean[0], &got[0], "clean outcomes are not copied")

	dirty := []store.Outcome{{Error: "boom", Worker: "w1"}, {Error: "a\x00b", Worker: "w\xff", Result: []byte(`"\u0000"`)}}
	got = store.SanitizeOutcomes(dirty)
	require.Equal(t, []store.Outcome{{Error: "boom", Worker: "w1"}, {Error: "a\uFFFDb", Worker: "w\uFFFD", Result: []byte(`"\u0000"`)}}, got)
	require.Equal(t, "a\x00b", dirty[1].Error, "the caller's outcomes are left as they are")
}
