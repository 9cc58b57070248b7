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
