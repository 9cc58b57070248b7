package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store/internal/engine"
)

// TaskPayload returns task taskID of job jobID's payload; an unknown job
// or task wraps warren.ErrNotFound.
func (s *Store) TaskPayload(ctx context.Context, jobID string, taskID int64) (json.RawMessage, error) {
	// EXISTS: the tasks of a deleted job outlive its row until they are
	// purged, and are not its tasks.
	var payload []byte
	err := s.r.QueryRowContext(ctx, `SELECT payload FROM tasks
		WHERE job_id = ?1 AND task_id = ?2 AND EXISTS (SELECT 1 FROM jobs WHERE id = ?1)`, jobID, taskID).Scan(&payload)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlite: payload of task %d of job %s: %w", taskID, jobID, warren.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: payload of task %d of job %s: %w", taskID, jobID, err)
	}
	if len(payload) == 0 {
		payload = []byte("null")
	}
	return payload, nil
}

// TaskAttempts returns the attempts kept of task taskID of job jobID,
// oldest first, with its first run when it completed on it
// (engine.WithFirstRun); an unknown job or task wraps warren.ErrNotFound.
func (s *Store) TaskAttempts(ctx context.Context, jobID string, taskID int64) ([]warren.TaskAttempt, error) {
	t, err := s.GetTask(ctx, jobID, taskID)
	if err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT attempt, generation, outcome, worker, started_at, finished_at, error, traceback
		FROM task_attempts WHERE job_id = ?1 AND task_id = ?2 ORDER BY attempt`, jobID, taskID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: attempts of task %d of job %s: %w", taskID, jobID, err)
	}
	defer rows.Close()
	var attempts []warren.TaskAttempt
	for rows.Next() {
		var (
			a        warren.TaskAttempt
			outcome  string
			started  sql.NullInt64
			finished int64
		)
		if err := rows.Scan(&a.Attempt, &a.Generation, &outcome, &a.Worker, &started, &finished, &a.Error, &a.Traceback); err != nil {
			return nil, fmt.Errorf("sqlite: attempts of task %d of job %s: %w", taskID, jobID, err)
		}
		a.Outcome, a.StartedAt, a.FinishedAt = warren.AttemptOutcome(outcome), timeOf(started), time.UnixMicro(finished).UTC()
		attempts = append(attempts, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: attempts of task %d of job %s: %w", taskID, jobID, err)
	}
	return engine.WithFirstRun(t, attempts), nil
}
