package sqlite

import (
	"context"
	"fmt"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store/internal/engine"
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

// OpenQueues returns the work queues of the open jobs, each once, sorted.
func (s *Store) OpenQueues(ctx context.Context) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT DISTINCT queue FROM jobs INDEXED BY jobs_open WHERE state IN ('pending', 'running')`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open queues: %w", err)
	}
	defer rows.Close()
	var queues []string
	for rows.Next() {
		var q string
		if err := rows.Scan(&q); err != nil {
			return nil, fmt.Errorf("sqlite: open queues: %w", err)
		}
		queues = append(queues, q)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: open queues: %w", err)
	}
	return engine.SortQueues(queues), nil
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
