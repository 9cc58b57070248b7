package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store/internal/engine"
)

// TaskPayload returns task taskID of job jobID's payload. An unknown job
// or task: warren.ErrNotFound.
func (s *Store) TaskPayload(ctx context.Context, jobID string, taskID int64) (json.RawMessage, error) {
	// EXISTS: the tasks of a deleted job outlive its row until they are
	// purged, and are not its tasks.
	var payload []byte
	err := s.pool.QueryRow(ctx, `SELECT payload FROM tasks
		WHERE job_id = $1 AND task_id = $2 AND EXISTS (SELECT 1 FROM jobs WHERE id = $1)`, jobID, taskID).Scan(&payload)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("postgres: payload of task %d of job %q: %w", taskID, jobID, warren.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: payload of task %d of job %q: %w", taskID, jobID, err)
	}
	if len(payload) == 0 {
		payload = []byte("null")
	}
	return payload, nil
}

// TaskAttempts returns the attempts kept of task taskID of job jobID,
// oldest first, with its first run when it completed on it
// (engine.WithFirstRun). An unknown job or task: warren.ErrNotFound.
func (s *Store) TaskAttempts(ctx context.Context, jobID string, taskID int64) ([]warren.TaskAttempt, error) {
	t, err := s.GetTask(ctx, jobID, taskID)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT attempt, generation, outcome, worker, started_at, finished_at, error, traceback
		FROM task_attempts WHERE job_id = $1 AND task_id = $2 ORDER BY attempt`, jobID, taskID)
	if err != nil {
		return nil, fmt.Errorf("postgres: attempts of task %d of job %q: %w", taskID, jobID, err)
	}
	attempts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (warren.TaskAttempt, error) {
		var (
			a       warren.TaskAttempt
			outcome string
		)
		err := row.Scan(&a.Attempt, &a.Generation, &outcome, &a.Worker, &a.StartedAt, &a.FinishedAt, &a.Error, &a.Traceback)
		a.Outcome, a.StartedAt, a.FinishedAt = warren.AttemptOutcome(outcome), utc(a.StartedAt), a.FinishedAt.UTC()
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: attempts of task %d of job %q: %w", taskID, jobID, err)
	}
	return engine.WithFirstRun(t, attempts), nil
}
