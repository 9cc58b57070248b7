package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// SearchCostEnv names the variable that runs a driver's search cost
// measurement (its TestSearchCost): the number of jobs to load, e.g.
// 100000. Unset, the measurement is skipped.
const SearchCostEnv = "WARREN_SEARCH_COST_JOBS"

// SearchCostJobID is the id of job i (1..n) of a search cost load: 26
// characters, as a ULID has.
func SearchCostJobID(i int) string { return fmt.Sprintf("01JBSEARCH%016d", i) }

// MeasureSearch times ListJobs searches (a page of 50) over a store that
// a driver's test loaded with n jobs of this shape, job i (1..n) having
//
//   - id SearchCostJobID(i), created i milliseconds after some time;
//   - type "thumbnail", "wordcount", "echo", "resize" or "export" by i % 5;
//   - queue "gpu" when i % 10 == 0, else the default;
//   - metadata {"customer": "cust-<i % 1000>", "order": i, "region": "eu-west-<i % 3>"};
//   - one task; state completed, or failed when i % 100 == 0, with the
//     job's error "1 of 1 tasks failed" and the task's
//     "ValueError: bad pixel in image <i>";
//
// and logs, for each search, its matches and the median and slowest of
// runs, each reading the first page only: a next page costs about as
// much, read from its cursor.
func MeasureSearch(t *testing.T, s store.Store, n int) {
	const runs = 7
	mid := n / 2
	searches := []struct {
		name string
		opts store.ListJobsOpts
	}{
		{"list, no filter (baseline)", store.ListJobsOpts{}},
		{"list, created in one minute", store.ListJobsOpts{CreatedAfter: time.UnixMilli(0), CreatedBefore: time.UnixMilli(0)}},
		{"list, created before the oldest 10%", store.ListJobsOpts{CreatedBefore: time.UnixMilli(0)}},
		{"q=<id prefix of 10 jobs>", store.ListJobsOpts{Search: SearchCostJobID(mid)[:25]}},
		{"q=<one order number>", store.ListJobsOpts{Search: fmt.Sprint(mid + 7)}},
		{"q=cust-42 (1.1% of jobs)", store.ListJobsOpts{Search: "cust-42"}},
		{"q=thumbnail (20% of jobs)", store.ListJobsOpts{Search: "thumbnail"}},
		{"q=thumbnail&state=failed", store.ListJobsOpts{Search: "thumbnail", State: warren.JobFailed}},
		{"q=thumbnail&queue=gpu", store.ListJobsOpts{Search: "thumbnail", Queue: "gpu"}},
		{"q=bad pixel (task errors, 1%)", store.ListJobsOpts{Search: "bad pixel"}},
		{fmt.Sprintf("q=image %d (a task error)", mid), store.ListJobsOpts{Search: fmt.Sprintf("image %d", mid)}},
		{"q=nomatchanywhere", store.ListJobsOpts{Search: "nomatchanywhere"}},
	}
	first, err := s.GetJob(t.Context(), SearchCostJobID(mid))
	require.NoError(t, err, "the store holds a search cost load of %d jobs", n)
	searches[1].opts.CreatedAfter, searches[1].opts.CreatedBefore = first.CreatedAt, first.CreatedAt.Add(time.Minute)
	tenth, err := s.GetJob(t.Context(), SearchCostJobID(n/10))
	require.NoError(t, err)
	searches[2].opts.CreatedBefore = tenth.CreatedAt
	for _, sc := range searches {
		opts := sc.opts
		opts.Limit = 50
		var (
			took []time.Duration
			got  int
		)
		for range runs {
			start := time.Now()
			jobs, _, err := s.ListJobs(t.Context(), opts)
			took = append(took, time.Since(start))
			require.NoError(t, err, sc.name)
			got = len(jobs)
		}
		slices.Sort(took)
		t.Logf("%-34s %3d on the page  median %8.2f ms  slowest %8.2f ms", sc.name, got,
			float64(took[runs/2].Microseconds())/1000, float64(took[runs-1].Microseconds())/1000)
	}
}
