package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warrenhq/warren/store"
)

// deliveryColumns is the column list scanDelivery reads, in its order,
// of webhook_deliveries as d.
const deliveryColumns = `d.id, d.job_id, d.event, d.state, d.attempts, d.last_status, d.last_error, d.created_at,
	d.next_attempt_at, d.delivered_at`

// claimDeliveriesSQL claims up to $3 pending deliveries due at $1, the
// longest due first, skipping those another claim holds: their attempts
// go up by one and they are due again at $2 (the lease). It returns them
// with their bodies and their jobs' webhooks; only delivery rows are
// locked.
const claimDeliveriesSQL = `
	WITH due AS (
		SELECT id FROM webhook_deliveries
		WHERE state = 'pending' AND next_attempt_at <= $1
		ORDER BY next_attempt_at, id
		LIMIT $3
		FOR UPDATE SKIP LOCKED
	)
	UPDATE webhook_deliveries d SET attempts = d.attempts + 1, next_attempt_at = $2
	FROM due, jobs j
	WHERE d.id = due.id AND j.id = d.job_id
	RETURNING ` + deliveryColumns + `, d.body, j.webhook_url, j.webhook_secret`

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

// ClaimDeliveries claims up to claim.Limit due pending deliveries in one
// statement (claimDeliveriesSQL): several servers may claim at once, and
// FOR UPDATE SKIP LOCKED hands each delivery to one of them.
func (s *Store) ClaimDeliveries(ctx context.Context, claim store.DeliveryClaim) ([]store.ClaimedDelivery, error) {
	now := claim.Now.UTC().Truncate(time.Microsecond)
	rows, err := s.pool.Query(ctx, claimDeliveriesSQL, now, now.Add(claim.Lease), store.PageSize(claim.Limit))
	if err != nil {
		return nil, fmt.Errorf("postgres: claim webhook deliveries: %w", err)
	}
	claimed, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.ClaimedDelivery, error) {
		var c store.ClaimedDelivery
		var err error
		c.Delivery, err = scanDelivery(row, &c.Body, &c.URL, &c.Secret)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: claim webhook deliveries: %w", err)
	}
	slices.SortFunc(claimed, func(a, b store.ClaimedDelivery) int { return cmp.Compare(a.ID, b.ID) })
	return claimed, nil
}

// RecordDeliveryAttempt records how attempt a ended, when the delivery is
// still pending and at a.Attempt.
func (s *Store) RecordDeliveryAttempt(ctx context.Context, a store.DeliveryAttempt) (bool, error) {
	if err := a.Validate(); err != nil {
		return false, fmt.Errorf("postgres: record webhook attempt: %w", err)
	}
	var next, delivered *time.Time
	switch a.State {
	case store.DeliveryPending:
		t := a.NextAttemptAt.UTC().Truncate(time.Microsecond)
		next = &t
	case store.DeliveryDelivered:
		t := a.At.UTC().Truncate(time.Microsecond)
		delivered = &t
	}
	tag, err := s.pool.Exec(ctx, `
		UPDATE webhook_deliveries
		SET state = $2, last_status = $3, last_error = $4, next_attempt_at = $5, delivered_at = $6
		WHERE id = $1 AND state = 'pending' AND attempts = $7`,
		a.ID, string(a.State), a.Status, store.StoredText(a.Error), next, delivered, a.Attempt)
	if err != nil {
		return false, fmt.Errorf("postgres: record webhook attempt of %s: %w", a.ID, err)
	}
	return tag.RowsAffected() == 1, nil
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
