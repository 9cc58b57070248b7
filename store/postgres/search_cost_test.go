package postgres_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/store/storetest"
)

// TestSearchCost measures ListJobs searches over a store of
// storetest.SearchCostEnv jobs (docs/store.md quotes it):
//
//	WARREN_SEARCH_COST_JOBS=100000 go test ./store/postgres -run TestSearchCost -v
func TestSearchCost(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(storetest.SearchCostEnv))
	if n <= 0 {
		t.Skipf("set %s to the number of jobs to measure over", storetest.SearchCostEnv)
	}
	tb := setup(t)
	start := time.Now()
	// The shape storetest.MeasureSearch describes, written by SQL; the
	// indexes take it as they take any job.
	require.NoError(t, pgExec(t, tb.url, `
		INSERT INTO jobs (id, type, state, expected_tasks, completed_tasks, failed_tasks, queue, metadata, created_at, finished_at,
			error, search_text)
		SELECT '01JBSEARCH' || lpad(i::text, 16, '0'), t, CASE WHEN i % 100 = 0 THEN 'failed' ELSE 'completed' END,
			1, CASE WHEN i % 100 = 0 THEN 0 ELSE 1 END, CASE WHEN i % 100 = 0 THEN 1 ELSE 0 END,
			CASE WHEN i % 10 = 0 THEN 'gpu' ELSE '' END, convert_to(md, 'UTF8'),
			$2::timestamptz + i * interval '1 millisecond', $2::timestamptz + i * interval '1 millisecond' + interval '500 microseconds',
			CASE WHEN i % 100 = 0 THEN '1 of 1 tasks failed' ELSE '' END,
			t || E'\n' || CASE WHEN i % 10 = 0 THEN 'gpu' ELSE 'default' END || E'\n' || 'cust-' || (i % 1000) || E'\n' || i
				|| E'\n' || 'eu-west-' || (i % 3)
		FROM (SELECT i, (ARRAY['thumbnail', 'wordcount', 'echo', 'resize', 'export'])[i % 5 + 1] AS t,
			'{"customer":"cust-' || (i % 1000) || '","order":' || i || ',"region":"eu-west-' || (i % 3) || '"}' AS md
			FROM generate_series(1, $1::int) AS i) AS g`,
		n, time.Now().Add(-time.Duration(n)*time.Millisecond)))
	require.NoError(t, pgExec(t, tb.url, `
		INSERT INTO tasks (job_id, task_id, state, payload, attempts, error)
		SELECT id, 1, CASE WHEN failed_tasks = 1 THEN 'failed' ELSE 'completed' END, 'null', 1,
			CASE WHEN failed_tasks = 1 THEN 'ValueError: bad pixel in image ' || ltrim(substr(id, 11), '0') ELSE '' END
		FROM jobs`))
	require.NoError(t, pgExec(t, tb.url, `ANALYZE jobs; ANALYZE tasks`))
	t.Logf("loaded %d jobs in %v", n, time.Since(start).Round(time.Millisecond))
	storetest.MeasureSearch(t, tb.store, n)
}

// TestSearchWriteCost measures what the search's indexes add to writing
// storetest.SearchCostEnv job rows and as many task errors, in one
// statement each, with the indexes and without them (docs/store.md):
//
//	WARREN_SEARCH_COST_JOBS=50000 go test ./store/postgres -run TestSearchWriteCost -v
func TestSearchWriteCost(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(storetest.SearchCostEnv))
	if n <= 0 {
		t.Skipf("set %s to the number of rows to measure with", storetest.SearchCostEnv)
	}
	for _, indexed := range []bool{true, false, true, false} {
		tb := setup(t)
		if !indexed {
			require.NoError(t, pgExec(t, tb.url, `DROP INDEX IF EXISTS jobs_search_trgm_idx, tasks_error_trgm_idx, jobs_id_pattern_idx, jobs_queue_created_idx`))
		}
		start := time.Now()
		require.NoError(t, pgExec(t, tb.url, `INSERT INTO jobs (id, type, state, created_at, search_text)
			SELECT '01JBSEARCH' || lpad(i::text, 16, '0'), 'thumbnail', 'running', now(),
			'thumbnail' || E'\n' || 'default' || E'\n' || 'cust-' || (i % 1000) || E'\n' || i || E'\n' || 'eu-west-' || (i % 3)
			FROM generate_series(1, $1::int) i`, n))
		jobs := time.Since(start)
		require.NoError(t, pgExec(t, tb.url, `INSERT INTO tasks (job_id, task_id, state, payload) SELECT id, 1, 'queued', '1' FROM jobs`))
		start = time.Now()
		require.NoError(t, pgExec(t, tb.url, `UPDATE tasks SET state = 'failed', error = 'ValueError: bad pixel at (3, 4) in image ' || job_id`))
		fails := time.Since(start)
		t.Logf("indexed %-5v: a job row %6.1f µs, a task error %6.1f µs", indexed,
			float64(jobs.Microseconds())/float64(n), float64(fails.Microseconds())/float64(n))
	}
}
