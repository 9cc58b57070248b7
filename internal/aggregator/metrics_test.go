package aggregator_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/aggregator"
	"github.com/warrenhq/warren/store"
)

// A batch's spawned tasks and refused spawns are counted.
func TestMetricsCountSpawns(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	h := aggregator.NewMetrics(reg).Hooks(aggregator.Hooks{})
	h.OnBatch(3, store.ApplyReport{Applied: 3, AppliedFailed: 1, Spawned: 7, SpawnedJobs: []string{"j"}, SpawnRefused: 1})
	h.OnBatch(1, store.ApplyReport{Applied: 1, Spawned: 2, SpawnedJobs: []string{"j"}})
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP warren_spawns_refused_total Results recorded failed because their spawn was refused (over the per-job or per-task limit, not JSON, of a reduce task).
# TYPE warren_spawns_refused_total counter
warren_spawns_refused_total 1
# HELP warren_tasks_spawned_total Tasks added to their jobs by the spawns of recorded results.
# TYPE warren_tasks_spawned_total counter
warren_tasks_spawned_total 9
`), "warren_tasks_spawned_total", "warren_spawns_refused_total"))
}
