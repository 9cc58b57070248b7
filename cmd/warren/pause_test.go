package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/client"
)

// pause and resume, of a job or of a queue: a line each, or the API's
// JSON; status shows the pause; a bad command line exits 2 with one
// line.
func TestPauseAndResumeCommands(t *testing.T) {
	t.Parallel()
	url, _ := apiServer(t)
	vars := map[string]string{"WARREN_SERVER": url}
	code, out, errOut := runCLIStdin(t, vars, `{"type":"echo","tasks":[1,2]}`, "submit", "-")
	require.Equal(t, 0, code, errOut)
	id := strings.TrimSpace(out)

	code, out, errOut = runCLI(t, vars, "pause", id)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `^job `+id+` is paused since \S+ \(pending\)\n$`, out)
	code, out, errOut = runCLI(t, vars, "status", id)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "paused    since ")
	require.Contains(t, out, "warren resume "+id)

	code, out, errOut = runCLI(t, vars, "resume", id, "--json")
	require.Equal(t, 0, code, errOut)
	var job client.Job
	require.NoError(t, json.Unmarshal([]byte(out), &job))
	require.False(t, job.Paused)

	code, out, errOut = runCLI(t, vars, "pause", "--queue", "default")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `^queue default is paused since \S+\n$`, out)
	code, out, errOut = runCLI(t, vars, "status", id)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "its work queue default is paused")
	code, out, errOut = runCLI(t, vars, "resume", "--queue", "default")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "queue default is resumed\n", out)

	for _, args := range [][]string{{"pause"}, {"pause", id, "--queue", "q"}, {"resume", "a", "b"}} {
		code, out, errOut = runCLI(t, vars, args...)
		require.Equal(t, exitUsage, code, "%v", args)
		require.Empty(t, out)
		require.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
		require.Contains(t, errOut, "want one job id or --queue QUEUE")
	}
	code, _, errOut = runCLI(t, vars, "pause", "no-such-job")
	require.Equal(t, exitError, code)
	require.Contains(t, errOut, "not found")
}
