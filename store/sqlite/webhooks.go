package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/warrenhq/warren/store"
)

// deliveryColumns is the column list scanDelivery reads, in its order.
const deliveryColumns = `id, job_id, event, state, attempts, last_status, last_error, created_at, next_attempt_at, delivered_at`

// scanDelivery reads a row of deliveryColumns, then into extra the
// columns that follow them.
func scanDelivery(row interface{ Scan(...any) error }, extra ...any) (store.Delivery, error) {
	var (
		d               store.Delivery
		state           string
		created         int64
		next, delivered sql.NullInt64
	)
	dest := []any{&d.ID, &d.JobID, &d.Event, &state, &d.Attempts, &d.LastStatus, &d.LastError, &created, &next, &delivered}
	if err := row.Scan(append(dest, extra...)...); err != nil {
		return store.Delivery{}, err
	}
	d.State = store.DeliveryState(state)
	d.CreatedAt = *timeOf(sql.NullInt64{Int64: created, Valid: true})
	d.NextAttemptAt = timeOf(next)
	d.DeliveredAt = timeOf(delivered)
	return d, nil
}

// ListDeliveries returns job jobID's deliveries oldest first, read in one
// read transaction. Unknown job: warren.ErrNotFound.
func (s *Store) ListDeliveries(ctx context.Context, jobID string) ([]store.Delivery, error) {
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("sqlite: deliveries of %s: %w", jobID, err)
	}
	defer tx.Rollback()
	if _, err := getJob(ctx, tx, "id = ?", jobID); err != nil {
		return nil, fmt.Errorf("sqlite: deliveries of %s: %w", jobID, err)
	}
	rows, err := tx.QueryContext(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries WHERE job_id = ? ORDER BY id`, jobID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: deliveries of %s: %w", jobID, err)
	}
	defer rows.Close()
	deliveries := []store.Delivery{}
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: deliveries of %s: %w", jobID, err)
		}
		deliveries = append(deliveries, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: deliveries of %s: %w", jobID, err)
	}
	return deliveries, nil
}

// PendingDeliveries counts the pending deliveries.
func (s *Store) PendingDeliveries(ctx context.Context) (int64, error) {
	var n int64
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM webhook_deliveries INDEXED BY webhook_deliveries_due
		WHERE state = 'pending'`).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite: pending webhook deliveries: %w", err)
	}
	return n, nil
}
