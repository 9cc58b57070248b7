package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/client"
	"github.com/warrenhq/warren/store"
)

// warren task ID N shows one task whole: its fields, each attempt with
// its error and traceback, for people or, with --json, as the API says.
func TestTaskCommand(t *testing.T) {
	t.Parallel()
	url, st := apiServer(t)
	vars := map[string]string{"WARREN_SERVER": url}
	code, out, errOut := runCLIStdin(t, vars, `{"type":"echo","max_retries":2,"tasks":[{"n":1}]}`, "submit")
	require.Equal(t, 0, code, errOut)
	id := strings.TrimSpace(out)
	ctx := context.Background()
	_, err := st.RelayBatch(ctx, 10, func(_ context.Context, tasks []store.OutboxTask) ([]store.TaskRef, error) {
		return []store.TaskRef{tasks[0].Ref()}, nil
	})
	require.NoError(t, err)
	_, err = st.ApplyOutcomes(ctx, []store.Outcome{
		{JobID: id, TaskID: 1, State: warren.TaskFailed, Retry: true, Attempts: 1, Worker: "py-1",
			Error: "ValueError: bad n", Traceback: "Traceback (most recent call last):\n  File \"h.py\", line 3, in handle\nValueError: bad n\n"},
	})
	require.NoError(t, err)
	_, err = st.ApplyOutcomes(ctx, []store.Outcome{
		{JobID: id, TaskID: 1, State: warren.TaskCompleted, Result: json.RawMessage(`{"ok":true}`), Attempts: 2, Worker: "py-2"},
	})
	require.NoError(t, err)

	code, out, errOut = runCLI(t, vars, "task", id, "1")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "Task 1 of job "+id+": completed (generation 1, 2 attempts)")
	require.Contains(t, out, `Payload:   {"n":1}`)
	require.Contains(t, out, `Result:    {"ok":true}`)
	require.Regexp(t, `(?m)^  #1  retried\s+py-1 `, out)
	require.Contains(t, out, "      error: ValueError: bad n")
	require.Contains(t, out, `      |   File "h.py", line 3, in handle`)
	require.Regexp(t, `(?m)^  #2  completed\s+py-2 `, out)

	var got client.TaskDetail
	code, out, errOut = runCLI(t, vars, "task", "--json", id, "1")
	require.Equal(t, 0, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Len(t, got.AttemptHistory, 2)
	require.Equal(t, warren.AttemptRetried, got.AttemptHistory[0].Outcome)
	require.Contains(t, got.AttemptHistory[0].Traceback, "ValueError: bad n")
	require.JSONEq(t, `{"n":1}`, string(got.Payload))

	code, _, errOut = runCLI(t, vars, "task", id, "7")
	require.Equal(t, exitError, code)
	require.Contains(t, errOut, "not found")
	for _, args := range [][]string{{"task", id}, {"task", id, "x"}, {"task", id, "-3"}, {"task", id, "1", "2"}} {
		code, _, errOut = runCLI(t, vars, args...)
		require.Equal(t, exitUsage, code, "%v", args)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, "one line: %q", errOut)
	}
}
