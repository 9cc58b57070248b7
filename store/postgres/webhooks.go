package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/warrenhq/warren/store"
)

// deliveryColumns is the column list scanDelivery reads, in its order,
// of webhook_deliveries as d.
const deliveryColumns = `d.id, d.job_id, d.event, d.state, d.attempts, d.last_status, d.last_error, d.created_at,
	d.next_attempt_at, d.delivered_at`

// scanDelivery reads a row of deliveryColumns, then into extra the
// columns that follow them.
func scanDelivery(row pgx.Row, extra ...any) (store.Delivery, error) {
	var (
		d     store.Delivery
		state string
	)
	dest := []any{&d.ID, &d.JobID, &d.Event, &state, &d.Attempts, &d.LastStatus, &d.LastError, &d.CreatedAt,
		&d.NextAttemptAt, &d.DeliveredAt}
	if err := row.Scan(append(dest, extra...)...); err != nil {
		return store.Delivery{}, err
	}
	d.State = store.DeliveryState(state)
	d.CreatedAt = d.CreatedAt.UTC()
	d.NextAttemptAt = utc(d.NextAttemptAt)
	d.DeliveredAt = utc(d.DeliveredAt)
	return d, nil
}

// ListDeliveries returns job jobID's deliveries oldest first. Unknown
// job: warren.ErrNotFound.
func (s *Store) ListDeliveries(ctx context.Context, jobID string) ([]store.Delivery, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries d
		WHERE d.job_id = $1 ORDER BY d.id`, jobID)
	if err != nil {
		return nil, fmt.Errorf("postgres: deliveries of %q: %w", jobID, err)
	}
	deliveries, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Delivery, error) { return scanDelivery(row) })
	if err != nil {
		return nil, fmt.Errorf("postgres: deliveries of %q: %w", jobID, err)
	}
	if len(deliveries) == 0 {
		exists, err := s.jobExists(ctx, s.pool, jobID)
		if err != nil {
			return nil, err
		}
		if !exists {
			return nil, notFound(jobID)
		}
		deliveries = []store.Delivery{}
	}
	return deliveries, nil
}

// PendingDeliveries counts the pending deliveries.
func (s *Store) PendingDeliveries(ctx context.Context) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE state = 'pending'`).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: pending webhook deliveries: %w", err)
	}
	return n, nil
}
