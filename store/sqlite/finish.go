package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

// ScanResults calls fn for each task of job jobID in task id order with
// its state and result (nil when it has none), reading the rows as a
// stream inside one read transaction, so fn sees one consistent snapshot.
// An unknown job wraps warren.ErrNotFound; an error from fn is returned as
// it is.
func (s *Store) ScanResults(ctx context.Context, jobID string, fn func(taskID int64, state warren.TaskState, result json.RawMessage) error) error {
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("sqlite: scan results of %s: %w", jobID, err)
	}
	defer tx.Rollback()
	if _, err := getJob(ctx, tx, "id = ?", jobID); err != nil {
		return fmt.Errorf("sqlite: scan results of %s: %w", jobID, err)
	}
	rows, err := tx.QueryContext(ctx, `SELECT task_id, state, result FROM tasks WHERE job_id = ? ORDER BY task_id`, jobID)
	if err != nil {
		return fmt.Errorf("sqlite: scan results of %s: %w", jobID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id     int64
			state  string
			result []byte
		)
		if err := rows.Scan(&id, &state, &result); err != nil {
			return fmt.Errorf("sqlite: scan results of %s: %w", jobID, err)
		}
		if err := fn(id, warren.TaskState(state), nilIfEmpty(result)); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlite: scan results of %s: %w", jobID, err)
	}
	return nil
}

// FinishJob closes open job jobID, still at version, as completed or
// failed in one transaction: it stamps finished_at, records errMsg,
// bumps the version, cancels the tasks still pending or queued, when
// result is not nil stores it and sets the job's ResultLocation
// (store.ResultLocation), and makes the job's webhook delivery, if it has
// a webhook. It returns false, changing nothing, when the job
// is already closed or no longer at version. Writes are serialised, so of
// several concurrent callers at one version exactly one gets true, and no
// reopen can come between the guard and the cancelling of the tasks. An
// unknown job returns false and an error wrapping warren.ErrNotFound; any
// other state than completed or failed is an error
// (store.ValidateFinishState) that changes nothing.
func (s *Store) FinishJob(ctx context.Context, jobID string, version int64, state warren.JobState, result []byte, errMsg string) (bool, error) {
	if err := store.ValidateFinishState(state); err != nil {
		return false, fmt.Errorf("sqlite: finish job %s: %w", jobID, err)
	}
	errMsg = store.StoredText(errMsg)
	var closed bool
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		closed = false
		at := now()
		var location string
		if result != nil {
			location = store.ResultLocation(jobID)
		}
		var webhook string
		err := tx.QueryRowContext(ctx, `UPDATE jobs SET state = ?, finished_at = ?, error = ?, result_location = ?,
				version = version + 1
			WHERE id = ? AND version = ? AND state IN ('pending', 'running')
			RETURNING webhook_url`,
			string(state), at.UnixMicro(), errMsg, location, jobID, version).Scan(&webhook)
		if errors.Is(err, sql.ErrNoRows) {
			_, err := getJob(ctx, tx, "id = ?", jobID)
			return err // nil: closed, or moved since version
		}
		if err != nil {
			return err
		}
		closed = true
		if err := cancelUnfinished(ctx, tx, jobID, at); err != nil {
			return err
		}
		if result != nil {
			if _, err := tx.ExecContext(ctx, `INSERT INTO job_results (job_id, data) VALUES (?, ?)`, jobID, result); err != nil {
				return err
			}
		}
		if webhook == "" {
			return nil
		}
		j, err := getJob(ctx, tx, "id = ?", jobID)
		if err != nil {
			return err
		}
		return insertDelivery(ctx, tx, j)
	})
	if err != nil {
		return false, fmt.Errorf("sqlite: finish job %s: %w", jobID, err)
	}
	return closed, nil
}

// JobResult returns the reduced result FinishJob stored for job jobID, or
// an error wrapping warren.ErrNotFound when there is none.
func (s *Store) JobResult(ctx context.Context, jobID string) ([]byte, error) {
	var data []byte
	err := s.r.QueryRowContext(ctx, `SELECT data FROM job_results WHERE job_id = ?`, jobID).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlite: result of job %s: %w", jobID, warren.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: result of job %s: %w", jobID, err)
	}
	return data, nil
}
