package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/broker/amqptest"
)

// `warren demo --json` on a corpus whose word counts the test computes on
// its own, with a word defined independently of the handler's code.
func TestDemoJSONCountsTheWordsOfItsInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	files := map[string]string{
		"a.txt":          "The quick brown fox\njumps over the lazy dog.\nTHE END\n",
		"nested/b.md":    "Ünïcode wörds: café, CAFÉ, naïve — 42 times 42!\nfox-trot and fox_trot\n",
		"nested/deep/c":  strings.Repeat("alpha beta gamma\n", 50),
		"nested/skip.db": "binary\x00data the the the",
	}
	want := map[string]int64{}
	word := regexp.MustCompile(`[\p{L}\p{N}]+`)
	for name, text := range files {
		path := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
		if strings.Contains(text, "\x00") {
			continue
		}
		for _, w := range word.FindAllString(text, -1) {
			want[strings.ToLower(w)]++
		}
	}
	code, out, errOut := runCLI(t, map[string]string{"WARREN_AMQP_URL": amqptest.URL()},
		"demo", "--json", "--input", dir, "--chunk-lines", "3", "--workers", "3", "--fail-rate", "0.5")
	require.Equal(t, 0, code, errOut)

	var got struct {
		Job struct {
			State          string `json:"state"`
			ExpectedTasks  int64  `json:"expected_tasks"`
			CompletedTasks int64  `json:"completed_tasks"`
			FailedTasks    int64  `json:"failed_tasks"`
			Reduce         string `json:"reduce"`
		} `json:"job"`
		Result map[string]int64 `json:"result"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	require.NoError(t, dec.Decode(&got), "stdout: %s", out)
	require.False(t, dec.More(), "exactly one JSON object on stdout")
	require.Equal(t, "completed", got.Job.State)
	// 1 chunk for a.txt, 1 for b.md, 17 for c.
	require.Equal(t, int64(19), got.Job.ExpectedTasks)
	require.Equal(t, got.Job.ExpectedTasks, got.Job.CompletedTasks)
	require.Zero(t, got.Job.FailedTasks)
	require.Equal(t, "merge", got.Job.Reduce)
	require.Equal(t, want, got.Result)
}

func TestDemoRejectsBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"demo", "--workers", "0"},
		{"demo", "--chunk-lines", "0"},
		{"demo", "--fail-rate", "1.5"},
		{"demo", "--input", "/no/such/dir"},
	} {
		// Bad values are usage errors (2); a missing --input directory
		// is found when it is read (3). Both were 1 before issue 15.
		code, out, errOut := runCLI(t, nil, args...)
		require.Contains(t, []int{exitUsage, exitError}, code, "%v", args)
		require.Empty(t, out)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, "one line: %q", errOut)
	}
}
