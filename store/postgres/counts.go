package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store/internal/engine"
	"github.com/warrenhq/warren/store/internal/sqlstore"
)

// CountJobs returns the number of jobs in each state.
func (s *Store) CountJobs(ctx context.Context) (map[warren.JobState]int64, error) {
	rows, err := s.pool.Query(ctx, `SELECT state, count(*) FROM jobs GROUP BY state`)
	if err != nil {
		return nil, fmt.Errorf("postgres: count jobs: %w", err)
	}
	defer rows.Close()
	counts, err := sqlstore.ScanJobCounts(rows)
	if err != nil {
		return nil, fmt.Errorf("postgres: count jobs: %w", err)
	}
	return counts, nil
}

// Backlog returns the number of pending tasks: the outbox's length. It
// uses the partial index of pending tasks.
func (s *Store) Backlog(ctx context.Context) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE state = 'pending'`).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: backlog: %w", err)
	}
	return n, nil
}

// OpenQueues returns the work queues of the open jobs, each once, sorted.
func (s *Store) OpenQueues(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT queue FROM jobs WHERE state IN ('pending', 'running')`)
	if err != nil {
		return nil, fmt.Errorf("postgres: open queues: %w", err)
	}
	queues, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("postgres: open queues: %w", err)
	}
	return engine.SortQueues(queues), nil
}
