package sqlite

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/store/storetest"
)

// TestSearchCost measures ListJobs searches over a store of
// storetest.SearchCostEnv jobs (docs/store.md quotes it):
//
//	WARREN_SEARCH_COST_JOBS=100000 go test ./store/sqlite -run TestSearchCost -v
func TestSearchCost(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(storetest.SearchCostEnv))
	if n <= 0 {
		t.Skipf("set %s to the number of jobs to measure over", storetest.SearchCostEnv)
	}
	s := openTest(t, filepath.Join(t.TempDir(), "warren.db"))
	start := time.Now()
	// The shape storetest.MeasureSearch describes, written in one
	// transaction by SQL; the triggers index it as they index any job.
	tx, err := s.w.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(t.Context(), `
		WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
		INSERT INTO jobs (id, type, state, expected_tasks, completed_tasks, failed_tasks, queue, metadata, created_at, finished_at,
			error, search_text)
		SELECT printf('01JBSEARCH%016d', i), t, CASE WHEN i % 100 = 0 THEN 'failed' ELSE 'completed' END,
			1, CASE WHEN i % 100 = 0 THEN 0 ELSE 1 END, CASE WHEN i % 100 = 0 THEN 1 ELSE 0 END,
			CASE WHEN i % 10 = 0 THEN 'gpu' ELSE '' END, CAST(md AS BLOB), ?2 + i * 1000, ?2 + i * 1000 + 500,
			CASE WHEN i % 100 = 0 THEN '1 of 1 tasks failed' ELSE '' END,
			t || char(10) || CASE WHEN i % 10 = 0 THEN 'gpu' ELSE 'default' END || char(10) || 'cust-' || (i % 1000) || char(10) || i
				|| char(10) || 'eu-west-' || (i % 3)
		FROM (SELECT i, CASE i % 5 WHEN 0 THEN 'thumbnail' WHEN 1 THEN 'wordcount' WHEN 2 THEN 'echo' WHEN 3 THEN 'resize' ELSE 'export' END AS t,
			'{"customer":"cust-' || (i % 1000) || '","order":' || i || ',"region":"eu-west-' || (i % 3) || '"}' AS md FROM n)`,
		n, time.Now().Add(-time.Duration(n)*time.Millisecond).UnixMicro())
	require.NoError(t, err)
	_, err = tx.ExecContext(t.Context(), `
		INSERT INTO tasks (job_id, task_id, state, payload, attempts, error)
		SELECT id, 1, CASE WHEN seq % 100 = 0 THEN 'failed' ELSE 'completed' END, X'6e756c6c', 1,
			CASE WHEN seq % 100 = 0 THEN 'ValueError: bad pixel in image ' || seq ELSE '' END
		FROM jobs`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	_, err = s.w.ExecContext(t.Context(), `ANALYZE`)
	require.NoError(t, err)
	t.Logf("loaded %d jobs in %v", n, time.Since(start).Round(time.Millisecond))
	storetest.MeasureSearch(t, s, n)
}

// TestSearchWriteCost measures what the search's triggers add to writing
// storetest.SearchCostEnv job rows and as many task errors, in one
// statement each, with the triggers and without them (docs/store.md):
//
//	WARREN_SEARCH_COST_JOBS=50000 go test ./store/sqlite -run TestSearchWriteCost -v
func TestSearchWriteCost(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(storetest.SearchCostEnv))
	if n <= 0 {
		t.Skipf("set %s to the number of rows to measure with", storetest.SearchCostEnv)
	}
	for _, indexed := range []bool{true, false, true, false} {
		s := openTest(t, filepath.Join(t.TempDir(), "warren.db"))
		if !indexed {
			for _, tr := range []string{"job_search_insert", "task_error_search_update"} {
				_, err := s.w.ExecContext(t.Context(), `DROP TRIGGER `+tr)
				require.NoError(t, err)
			}
		}
		start := time.Now()
		_, err := s.w.ExecContext(t.Context(), `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
			INSERT INTO jobs (id, type, state, created_at, search_text) SELECT printf('01JBSEARCH%016d', i), 'thumbnail', 'running', i,
			'thumbnail' || char(10) || 'default' || char(10) || 'cust-' || (i % 1000) || char(10) || i || char(10) || 'eu-west-' || (i % 3) FROM n`, n)
		require.NoError(t, err)
		jobs := time.Since(start)
		_, err = s.w.ExecContext(t.Context(), `INSERT INTO tasks (job_id, task_id, state, payload) SELECT id, 1, 'queued', X'31' FROM jobs`)
		require.NoError(t, err)
		start = time.Now()
		_, err = s.w.ExecContext(t.Context(), `UPDATE tasks SET state = 'failed', error = 'ValueError: bad pixel at (3, 4) in image ' || job_id`)
		require.NoError(t, err)
		fails := time.Since(start)
		t.Logf("indexed %-5v: a job row %6.1f µs, a task error %6.1f µs", indexed,
			float64(jobs.Microseconds())/float64(n), float64(fails.Microseconds())/float64(n))
	}
}
