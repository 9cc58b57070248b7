package postgres

import (
	"context"
	"time"

	"github.com/warrenhq/warren/store/internal/engine"
)

// The retention statements, for the plan test.
const (
	ExpiringByDefaultSQL = expiringByDefaultSQL
	ExpiringByOwnSQL     = expiringByOwnSQL
	PurgeTasksSQL        = purgeTasksSQL
)

// OpenWithProcessClock opens a store on url whose process reads local as
// its own clock: a server whose clock is off, for the skew tests.
func OpenWithProcessClock(ctx context.Context, url string, local func() time.Time) (*Store, error) {
	return openWith(ctx, url, engine.Options{Local: local})
}

// SynchronousCommitOf returns synchronous_commit as a relay round's
// transaction (relay true) or any other transaction sees it.
func SynchronousCommitOf(ctx context.Context, s *Store, relay bool) (string, error) {
	d := engineDriver{s}
	var t *tx
	if relay {
		rt, err := d.BeginRelay(ctx)
		if err != nil {
			return "", err
		}
		t = rt.(*tx)
	} else {
		et, err := d.Begin(ctx)
		if err != nil {
			return "", err
		}
		t = et.(*tx)
	}
	defer func() { _ = t.tx.Rollback(context.WithoutCancel(ctx)) }()
	var v string
	err := t.tx.QueryRow(ctx, "SHOW synchronous_commit").Scan(&v)
	return v, err
}
