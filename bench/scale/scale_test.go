package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// VmHWM and VmRSS come out of a /proc/PID/status in kB.
func TestParseStatus(t *testing.T) {
	t.Parallel()
	status := "Name:\twarren\nVmPeak:\t 1300000 kB\nVmHWM:\t   81234 kB\nVmRSS:\t   80000 kB\nThreads:\t9\n"
	hwm, rss, err := parseStatus([]byte(status))
	require.NoError(t, err)
	require.Equal(t, int64(81234), hwm)
	require.Equal(t, int64(80000), rss)

	_, _, err = parseStatus([]byte("Name:\twarren\n"))
	require.Error(t, err, "a status without the memory lines (a kernel thread) is an error")
}

// utime and stime are counted after the command name, which may hold
// spaces and parentheses.
func TestParseStat(t *testing.T) {
	t.Parallel()
	stat := "4242 (war ren) (x)) S 1 4242 4242 0 -1 4194560 5000 0 0 0 123 45 0 0 20 0 9 0 100 1000 200\n"
	ticks, err := parseStat([]byte(stat))
	require.NoError(t, err)
	require.Equal(t, int64(123+45), ticks)

	_, err = parseStat([]byte("4242 (warren) S 1 2"))
	require.Error(t, err)
}

// The spec is the job on the first line, then one payload per task;
// batch_size appears only when given (0 leaves it to warren).
func TestWriteSpec(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{0, 1, 32} {
		path := filepath.Join(t.TempDir(), "job.ndjson")
		size, err := writeSpec(path, 1000, batch)
		require.NoError(t, err)
		fh, err := os.Open(path)
		require.NoError(t, err)
		t.Cleanup(func() { _ = fh.Close() })
		st, err := fh.Stat()
		require.NoError(t, err)
		require.Equal(t, st.Size(), size)

		sc := bufio.NewScanner(fh)
		require.True(t, sc.Scan())
		var head map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &head))
		want := map[string]any{"type": "echo", "reduce": "none"}
		if batch > 0 {
			want["batch_size"] = float64(batch)
		}
		require.Equal(t, want, head)
		n := 0
		for sc.Scan() {
			n++
			if got, want := sc.Text(), `{"i":`+strconv.Itoa(n)+`}`; got != want {
				t.Fatalf("line %d: got %s, want %s", n+1, got, want)
			}
		}
		require.NoError(t, sc.Err())
		require.Equal(t, 1000, n)
	}
}

// A log's tail is its last lines, newline-terminated, however the file
// ends.
func TestLastLines(t *testing.T) {
	t.Parallel()
	require.Equal(t, "c\nd\n", lastLines([]byte("a\nb\nc\nd\n"), 2))
	require.Equal(t, "a\nb\n", lastLines([]byte("a\nb"), 5))
	require.Equal(t, "(empty)\n", lastLines(nil, 5))
}

// The children get no WARREN_* settings from the caller's environment.
func TestChildEnvDropsWarrenSettings(t *testing.T) {
	t.Setenv("WARREN_API_TOKENS", "secret:read")
	t.Setenv("SCALE_TEST_KEPT", "1")
	env := childEnv()
	require.Contains(t, env, "SCALE_TEST_KEPT=1")
	for _, kv := range env {
		require.NotRegexp(t, "^WARREN_", kv)
	}
}

// Flags are checked before anything starts.
func TestParseFlagsRejectsBadValues(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--tasks", "0"}, {"--batch-size", "-1"}, {"--batch-size", "100000"},
		{"--workers", "0"}, {"--concurrency", "0"}, {"--timeout", "0s"}, {"extra"},
		{"--servers", "0"}, {"--servers", "2"}, {"--servers", "2", "--database", "sqlite:///tmp/x.db"}} {
		_, err := parseFlags(args, discard{})
		require.Error(t, err, "%v", args)
	}
	c, err := parseFlags([]string{"--tasks", "20000", "--batch-size", "32"}, discard{})
	require.NoError(t, err)
	require.Equal(t, 20000, c.tasks)
	require.Equal(t, 32, c.batchSize)
	require.Equal(t, 2, c.workers)
	require.Equal(t, 16, c.concurrency)
	require.Equal(t, 1, c.servers)
	c, err = parseFlags([]string{"--servers", "2", "--database", "postgres://127.0.0.1/test"}, discard{})
	require.NoError(t, err)
	require.Equal(t, 2, c.servers)
}

// discard is an io.Writer that drops everything.
type discard struct{}

// Write drops p.
func (discard) Write(p []byte) (int, error) { return len(p), nil }
