package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// `warren submit` takes max_concurrency from the spec, and `warren
// status` shows the cap (and nothing for a job without one).
func TestSubmitAndStatusShowTheConcurrencyCap(t *testing.T) {
	t.Parallel()
	url, st := apiServer(t)
	code, out, errOut := runCLI(t, nil, "submit", "--server", url, writeFile(t, `{"type":"echo","max_concurrency":3,"tasks":[1,2]}`))
	require.Equal(t, 0, code, errOut)
	id := strings.TrimSpace(out)
	job, err := st.GetJob(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, 3, job.Policy.MaxConcurrency)

	code, out, _ = runCLI(t, nil, "status", id, "--server", url)
	require.Equal(t, 0, code)
	require.Contains(t, out, "cap       at most 3 tasks at once\n")

	code, out, errOut = runCLI(t, nil, "submit", "--server", url, writeFile(t, `{"type":"echo","tasks":[1]}`))
	require.Equal(t, 0, code, errOut)
	code, out, _ = runCLI(t, nil, "status", strings.TrimSpace(out), "--server", url)
	require.Equal(t, 0, code)
	require.NotContains(t, out, "cap ")

	code, _, errOut = runCLI(t, nil, "submit", "--server", url, writeFile(t, `{"type":"echo","max_concurrency":-1,"tasks":[1]}`))
	require.Equal(t, 3, code)
	require.Contains(t, errOut, "max_concurrency must be between 1 and 10000")
}
