package sqlite

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The mark's statements seek what they touch: the tasks by (job, task
// id), the jobs by id, and a job's pending tasks through tasks_by_state;
// none scans a table.
func TestMarkQueriesSeekWhatTheyTouch(t *testing.T) {
	t.Parallel()
	s := openTest(t, filepath.Join(t.TempDir(), "warren.db"))
	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"mark":  {markQueuedSQL, []any{1, "job", 1, 9, 1}},
		"idle":  {idleJobsSQL, []any{`["job"]`}},
		"start": {startJobsSQL, []any{`["job"]`, 1}},
	} {
		plan := queryPlan(t, s.r, q.sql, q.args...)
		for _, step := range plan {
			require.NotRegexp(t, `^SCAN (j|jobs|t|tasks)\b`, step, "%s scans a table: %q", name, plan)
			require.NotContains(t, step, "jobs_by_state", "%s walks every job in a state: %q", name, plan)
			require.NotContains(t, step, "TEMP B-TREE", "%s sorts: %q", name, plan)
		}
	}
}
