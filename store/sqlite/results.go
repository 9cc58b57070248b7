package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/warrenhq/warren"
)

// resultPartBytes is the size of the parts a large result is stored in
// (job_result_parts): SQLite reads a BLOB value whole whatever part of it
// a query asks for, so a result is read a part at a time only if it is
// stored so. A result no larger is stored whole in job_results, as ever.
const resultPartBytes = 256 << 10

// queryer is what reads and writes a result: the write transaction or a
// read connection.
type queryer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// putResult stores job jobID's result, replacing any earlier one: whole
// when it fits in a part, else in parts.
func putResult(ctx context.Context, q queryer, jobID string, data []byte) error {
	if _, err := q.ExecContext(ctx, `DELETE FROM job_result_parts WHERE job_id = ?`, jobID); err != nil {
		return err
	}
	if len(data) <= resultPartBytes {
		_, err := q.ExecContext(ctx, `INSERT INTO job_results (job_id, data, parts) VALUES (?, ?, 0)
			ON CONFLICT (job_id) DO UPDATE SET data = excluded.data, parts = 0`, jobID, data)
		return err
	}
	parts := 0
	for off := 0; off < len(data); off += resultPartBytes {
		end := min(off+resultPartBytes, len(data))
		if _, err := q.ExecContext(ctx, `INSERT INTO job_result_parts (job_id, part, data) VALUES (?, ?, ?)`, jobID, parts, data[off:end]); err != nil {
			return err
		}
		parts++
	}
	_, err := q.ExecContext(ctx, `INSERT INTO job_results (job_id, data, parts) VALUES (?, x'', ?)
		ON CONFLICT (job_id) DO UPDATE SET data = excluded.data, parts = excluded.parts`, jobID, parts)
	return err
}

// readResult reads job jobID's whole result; sql.ErrNoRows when it has
// none.
func readResult(ctx context.Context, q queryer, jobID string) ([]byte, error) {
	var (
		data  []byte
		parts int
	)
	if err := q.QueryRowContext(ctx, `SELECT data, parts FROM job_results WHERE job_id = ?`, jobID).Scan(&data, &parts); err != nil {
		return nil, err
	}
	if parts == 0 {
		return data, nil
	}
	rows, err := q.QueryContext(ctx, `SELECT data FROM job_result_parts WHERE job_id = ? ORDER BY part`, jobID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var buf bytes.Buffer
	for rows.Next() {
		var part []byte
		if err := rows.Scan(&part); err != nil {
			return nil, err
		}
		buf.Write(part)
	}
	return buf.Bytes(), rows.Err()
}

// deleteResult deletes job jobID's result, parts and all.
func deleteResult(ctx context.Context, q queryer, jobID string) error {
	if _, err := q.ExecContext(ctx, `DELETE FROM job_result_parts WHERE job_id = ?`, jobID); err != nil {
		return err
	}
	_, err := q.ExecContext(ctx, `DELETE FROM job_results WHERE job_id = ?`, jobID)
	return err
}

// JobResultRange returns up to n bytes of job jobID's stored reduced
// result from offset off, and the whole result's size, reading no more of
// it than the parts the range covers. A job without one: warren.ErrNotFound.
func (s *Store) JobResultRange(ctx context.Context, jobID string, off, n int64) ([]byte, int64, error) {
	if off < 0 || n < 0 {
		return nil, 0, fmt.Errorf("sqlite: result of job %s: range %d+%d is negative", jobID, off, n)
	}
	// One read transaction: the size and the parts are of one result,
	// even while a redrive replaces it.
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, 0, fmt.Errorf("sqlite: result of job %s: %w", jobID, err)
	}
	defer func() { _ = tx.Rollback() }()
	var size, parts int64
	err = tx.QueryRowContext(ctx, `SELECT length(data), parts FROM job_results WHERE job_id = ?`, jobID).Scan(&size, &parts)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, 0, fmt.Errorf("sqlite: result of job %s: %w", jobID, warren.ErrNotFound)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("sqlite: result of job %s: %w", jobID, err)
	}
	if parts == 0 {
		chunk, err := rangeOf(ctx, tx, `SELECT substr(data, ?, ?) FROM job_results WHERE job_id = ?`, off, n, size, jobID)
		return chunk, size, err
	}
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(sum(length(data)), 0) FROM job_result_parts WHERE job_id = ?`, jobID).Scan(&size); err != nil {
		return nil, 0, fmt.Errorf("sqlite: result of job %s: %w", jobID, err)
	}
	end := min(off+n, size)
	if off >= end {
		return []byte{}, size, nil
	}
	rows, err := tx.QueryContext(ctx, `SELECT part, data FROM job_result_parts WHERE job_id = ? AND part BETWEEN ? AND ? ORDER BY part`,
		jobID, off/resultPartBytes, (end-1)/resultPartBytes)
	if err != nil {
		return nil, 0, fmt.Errorf("sqlite: result of job %s: %w", jobID, err)
	}
	defer rows.Close()
	out := make([]byte, 0, end-off)
	for rows.Next() {
		var (
			part int64
			data []byte
		)
		if err := rows.Scan(&part, &data); err != nil {
			return nil, 0, fmt.Errorf("sqlite: result of job %s: %w", jobID, err)
		}
		start := part * resultPartBytes
		lo, hi := max(off, start)-start, min(end, start+int64(len(data)))-start
		if lo < hi {
			out = append(out, data[lo:hi]...)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("sqlite: result of job %s: %w", jobID, err)
	}
	return out, size, nil
}

// rangeOf reads n bytes from offset off of a value of size bytes with
// query (taking SQLite's 1-based offset, the length, then args).
func rangeOf(ctx context.Context, tx *sql.Tx, query string, off, n, size int64, args ...any) ([]byte, error) {
	if off >= size {
		return []byte{}, nil
	}
	var chunk []byte
	if err := tx.QueryRowContext(ctx, query, append([]any{off + 1, n}, args...)...).Scan(&chunk); err != nil {
		return nil, err
	}
	if chunk == nil {
		chunk = []byte{}
	}
	return chunk, nil
}
