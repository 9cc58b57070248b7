package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/client"
)

// list --search, --queue, --created-after and --created-before filter as
// the API's q, queue, created_after and created_before do, and the next
// page's hint repeats them.
func TestListSearches(t *testing.T) {
	t.Parallel()
	url, _ := apiServer(t)
	vars := map[string]string{"WARREN_SERVER": url}
	submit := func(spec string) string {
		t.Helper()
		code, out, errOut := runCLIStdin(t, vars, spec, "submit", "-")
		require.Equal(t, 0, code, errOut)
		return strings.TrimSpace(out)
	}
	gpu := submit(`{"type":"thumbnail","queue":"gpu","metadata":{"customer":"Acme Corp"},"tasks":[1]}`)
	acme := submit(`{"type":"echo","metadata":{"customer":"ACME Ltd"},"tasks":[1]}`)
	submit(`{"type":"echo","tasks":[1]}`)

	list := func(args ...string) []string {
		t.Helper()
		code, out, errOut := runCLI(t, vars, append([]string{"list", "--json"}, args...)...)
		require.Equal(t, 0, code, "%v: %s", args, errOut)
		var l client.JobList
		require.NoError(t, json.Unmarshal([]byte(out), &l))
		var ids []string
		for _, j := range l.Jobs {
			ids = append(ids, j.ID)
		}
		return ids
	}
	require.Equal(t, []string{acme, gpu}, list("--search", "acme"))
	require.Equal(t, []string{gpu}, list("--search", "acme", "--queue", "gpu"))
	require.Equal(t, []string{acme}, list("--search", "acme", "--type", "echo"))
	require.Len(t, list("--created-after", "1h"), 3, "a duration ago")
	require.Empty(t, list("--created-before", "1h"))
	require.Len(t, list("--created-before", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)), 3)

	code, out, errOut := runCLI(t, vars, "list", "--search", "acme", "--limit", "1")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, acme)
	require.Contains(t, errOut, "more: warren list --search acme --cursor ")
	code, _, errOut = runCLI(t, vars, "list", "--search", "Acme Corp", "--limit", "1")
	require.Equal(t, 0, code, errOut)
	require.NotContains(t, errOut, "more:", "one match, one page")

	code, out, errOut = runCLI(t, vars, "list", "--created-after", "yesterday")
	require.Equal(t, exitUsage, code)
	require.Empty(t, out)
	require.Contains(t, errOut, `--created-after: "yesterday" is neither an RFC 3339 time`)
	code, out, errOut = runCLI(t, vars, "list", "--search", "ab")
	require.Equal(t, exitError, code)
	require.Empty(t, out)
	require.Contains(t, errOut, "at least 3 characters")
	require.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, "one line: %q", errOut)
}

func TestShellQuote(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"acme": "acme", "2026-12-02T06:45:00Z": "2026-12-02T06:45:00Z", "Acme Corp": "'Acme Corp'",
		"it's": `'it'\''s'`, "": "''", "a$b": "'a$b'",
	} {
		require.Equal(t, want, shellQuote(in), "%q", in)
	}
}
