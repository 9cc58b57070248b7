package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

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

// ClaimDeliveries claims up to claim.Limit due pending deliveries in one
// write transaction (writes are serialised, so no two claims take one
// delivery). A reader looks first, so that a poll that finds nothing due
// never takes the writer.
func (s *Store) ClaimDeliveries(ctx context.Context, claim store.DeliveryClaim) ([]store.ClaimedDelivery, error) {
	limit := store.PageSize(claim.Limit)
	due := claim.Now.UTC().UnixMicro()
	var found bool
	if err := s.r.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM webhook_deliveries INDEXED BY webhook_deliveries_due
		WHERE state = 'pending' AND next_attempt_at <= ?)`, due).Scan(&found); err != nil {
		return nil, fmt.Errorf("sqlite: claim webhook deliveries: %w", err)
	}
	if !found {
		return nil, nil
	}
	var claimed []store.ClaimedDelivery
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		claimed = nil
		rows, err := tx.QueryContext(ctx, `UPDATE webhook_deliveries SET attempts = attempts + 1, next_attempt_at = ?
			WHERE id IN (SELECT id FROM webhook_deliveries INDEXED BY webhook_deliveries_due
				WHERE state = 'pending' AND next_attempt_at <= ? ORDER BY next_attempt_at, id LIMIT ?)
			RETURNING `+deliveryColumns+`, body`, claim.Now.Add(claim.Lease).UTC().UnixMicro(), due, limit)
		if err != nil {
			return err
		}
		for rows.Next() {
			var c store.ClaimedDelivery
			if c.Delivery, err = scanDelivery(rows, &c.Body); err != nil {
				rows.Close()
				return err
			}
			claimed = append(claimed, c)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for i := range claimed {
			if err := tx.QueryRowContext(ctx, `SELECT webhook_url, webhook_secret FROM jobs WHERE id = ?`, claimed[i].JobID).
				Scan(&claimed[i].URL, &claimed[i].Secret); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: claim webhook deliveries: %w", err)
	}
	slices.SortFunc(claimed, func(a, b store.ClaimedDelivery) int { return cmp.Compare(a.ID, b.ID) })
	return claimed, nil
}

// RecordDeliveryAttempt records how attempt a ended, when the delivery is
// still pending and at a.Attempt.
func (s *Store) RecordDeliveryAttempt(ctx context.Context, a store.DeliveryAttempt) (bool, error) {
	if err := a.Validate(); err != nil {
		return false, fmt.Errorf("sqlite: record webhook attempt: %w", err)
	}
	var next, delivered *time.Time
	switch a.State {
	case store.DeliveryPending:
		next = &a.NextAttemptAt
	case store.DeliveryDelivered:
		delivered = &a.At
	}
	var changed int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE webhook_deliveries
			SET state = ?, last_status = ?, last_error = ?, next_attempt_at = ?, delivered_at = ?
			WHERE id = ? AND state = 'pending' AND attempts = ?`,
			string(a.State), a.Status, store.StoredText(a.Error), micros(utcPtr(next)), micros(utcPtr(delivered)), a.ID, a.Attempt)
		if err != nil {
			return err
		}
		changed, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return false, fmt.Errorf("sqlite: record webhook attempt of %s: %w", a.ID, err)
	}
	return changed == 1, nil
}

// utcPtr returns *t in UTC at the store's precision, or nil.
func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC().Truncate(time.Microsecond)
	return &u
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
