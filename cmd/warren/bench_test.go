package main

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/cmd/warren/internal/bench"
	"github.com/warrenhq/warren/internal/broker/amqptest"
)

// `warren bench --json` against the real broker prints one object with
// every measurement present and consistent.
func TestBenchJSONReportsBothRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two benchmarks against the broker")
	}
	code, out, errOut := runCLI(t, map[string]string{"WARREN_AMQP_URL": amqptest.URL()},
		"bench", "--tasks", "2000", "--workers", "2", "--rounds", "2", "--json")
	// Exit 0 also means every task of the job was recorded completed with
	// its queued_at and finished_at: bench checks that before reporting.
	require.Equal(t, 0, code, errOut)
	require.Equal(t, 1, strings.Count(strings.TrimSpace(out), "\n")+1, "exactly one line on stdout: %q", out)

	dec := json.NewDecoder(bytes.NewReader([]byte(out)))
	dec.UseNumber()
	var raw map[string]any
	require.NoError(t, dec.Decode(&raw))
	for _, k := range []string{"tasks", "workers", "ceiling_tasks_per_s", "ceiling_prefetch", "warren_tasks_per_s",
		"ratio", "submit_s", "first_result_s", "p50_ms", "p99_ms", "peak_rss_mb", "one_task_jobs", "one_task_p50_ms",
		"warren_cpu_us_per_task", "aggregator_batches"} {
		v, ok := raw[k]
		require.True(t, ok, "missing %q in %s", k, out)
		n, err := v.(json.Number).Float64()
		require.NoError(t, err, k)
		require.Greater(t, n, 0.0, k)
	}

	var r bench.Report
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Equal(t, 2000, r.Tasks)
	require.Equal(t, 2, r.Workers)
	require.Zero(t, r.BatchSize, "no --batch-size: the job leaves it to warren")
	require.Contains(t, bench.Prefetches, r.CeilingPrefetch)
	require.InDelta(t, r.WarrenTasksPerS/r.CeilingTasksPerS, r.Ratio, 0.001)
	require.GreaterOrEqual(t, r.P99Ms, r.P50Ms)
	require.Greater(t, r.P50Ms, 0.0)
	require.False(t, math.IsInf(r.Ratio, 0) || math.IsNaN(r.Ratio))
	require.Len(t, r.RoundsCeiling, 2)
	require.Len(t, r.RoundsWarren, 2)
	require.Contains(t, r.RoundsWarren, r.WarrenTasksPerS, "the median round's")
	require.GreaterOrEqual(t, r.OneTaskP99Ms, r.OneTaskP50Ms)
	require.Contains(t, errOut, "warren bench: ceiling")
	require.Contains(t, errOut, "warren bench: round 2/2: warren")
}

func TestBenchRejectsBadFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tasks", "0"}, "--tasks must be >= 1"},
		{[]string{"--workers", "0"}, "--workers must be >= 1"},
		{[]string{"--batch-size", "1001"}, "--batch-size must be between 0 (automatic) and 1000, got 1001"},
		{[]string{"--rounds", "0"}, "--rounds must be >= 1"},
		{[]string{"--concurrency", "16", "--prefetch", "8"}, "--prefetch must be at least --concurrency (16), got 8"},
		{[]string{"--tree", "6"}, `--tree must be LEVELSxFANOUT, both >= 1 (like 6x6), got "6"`},
		{[]string{"--tree", "0x6"}, `--tree must be LEVELSxFANOUT, both >= 1 (like 6x6), got "0x6"`},
		{[]string{"--tree", "6x6", "--kill-workers", "-1"}, "--kill-workers must be >= 0, got -1"},
	} {
		code, out, errOut := runCLI(t, map[string]string{"WARREN_AMQP_URL": "amqp://guest:guest@127.0.0.1:1/"},
			append([]string{"bench"}, tc.args...)...)
		require.Equal(t, exitUsage, code, "%v", tc.args)
		require.Empty(t, out, "%v", tc.args)
		require.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
		require.Contains(t, errOut, tc.want, "%v", tc.args)
	}
}
