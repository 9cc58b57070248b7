package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/warrenhq/warren"
)

// ScanResults calls fn for each map task of job jobID (task_id > 0: never
// the reduce task) in task id order with its state and result (nil when
// it has none): ScanOutcomes from the first, so fn sees one consistent
// snapshot. An unknown job wraps warren.ErrNotFound; an error from fn is
// returned as it is.
func (s *Store) ScanResults(ctx context.Context, jobID string, fn func(taskID int64, state warren.TaskState, result json.RawMessage) error) error {
	return s.ScanOutcomes(ctx, jobID, 0, func(o warren.TaskOutcome) error { return fn(o.TaskID, o.State, o.Result) })
}

// ScanOutcomes calls fn for each map task of job jobID above after (and
// above 0: never the reduce task), in task id order, with its state,
// result and error, reading the rows as a stream inside one read
// transaction. An unknown job wraps warren.ErrNotFound; an error from fn
// is returned as it is.
func (s *Store) ScanOutcomes(ctx context.Context, jobID string, after int64, fn func(warren.TaskOutcome) error) error {
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("sqlite: scan outcomes of %s: %w", jobID, err)
	}
	defer tx.Rollback()
	if _, err := getJob(ctx, tx, "id = ?", jobID); err != nil {
		return fmt.Errorf("sqlite: scan outcomes of %s: %w", jobID, err)
	}
	rows, err := tx.QueryContext(ctx, `SELECT task_id, state, result, error FROM tasks
		WHERE job_id = ? AND task_id > max(?, 0) ORDER BY task_id`, jobID, after)
	if err != nil {
		return fmt.Errorf("sqlite: scan outcomes of %s: %w", jobID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			o      warren.TaskOutcome
			state  string
			result []byte
		)
		if err := rows.Scan(&o.TaskID, &state, &result, &o.Error); err != nil {
			return fmt.Errorf("sqlite: scan outcomes of %s: %w", jobID, err)
		}
		o.State, o.Result = warren.TaskState(state), nilIfEmpty(result)
		if err := fn(o); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlite: scan outcomes of %s: %w", jobID, err)
	}
	return nil
}

// JobResult returns the reduced result FinishJob stored for job jobID, or
// an error wrapping warren.ErrNotFound when there is none.
func (s *Store) JobResult(ctx context.Context, jobID string) ([]byte, error) {
	// One read transaction: a result stored in parts is read as one
	// result, even while a redrive and a new close replace it.
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("sqlite: result of job %s: %w", jobID, err)
	}
	defer func() { _ = tx.Rollback() }()
	data, err := readResult(ctx, tx, jobID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlite: result of job %s: %w", jobID, warren.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: result of job %s: %w", jobID, err)
	}
	return data, nil
}
