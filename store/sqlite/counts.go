package sqlite

import (
	"context"
	"fmt"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store/internal/sqlstore"
)

// CountJobs returns the number of jobs in each state.
func (s *Store) CountJobs(ctx context.Context) (map[warren.JobState]int64, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT state, count(*) FROM jobs GROUP BY state`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: count jobs: %w", err)
	}
	defer rows.Close()
	counts, err := sqlstore.ScanJobCounts(rows)
	if err != nil {
		return nil, fmt.Errorf("sqlite: count jobs: %w", err)
	}
	return counts, nil
}

// Backlog returns the number of pending tasks: the outbox's length. Only
// open jobs have pending tasks, so it seeks each open job's pending range
// instead of scanning every task.
func (s *Store) Backlog(ctx context.Context) (int64, error) {
	var n int64
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM jobs INDEXED BY jobs_open
		JOIN tasks ON tasks.job_id = jobs.id AND tasks.state = 'pending'
		WHERE jobs.state IN ('pending', 'running')`).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite: backlog: %w", err)
	}
	return n, nil
}
