package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/warrenhq/warren/internal/backoff"
	"github.com/warrenhq/warren/store"
)

// closedChannel is the channel a job's close (or cancel) notifies, with
// "<schema> <job id>" as the payload: installations in other schemas of
// the database share the channel and ignore each other's notices.
const closedChannel = "warren_job_closed"

var _ store.CloseListener = (*Store)(nil)

// ListenClosed implements store.CloseListener with LISTEN on a connection
// of its own, taken from the pool for good: every transaction that closes
// or cancels a job of this schema notifies it as it commits. A lost
// connection is listened on again, after a backoff; the closes between
// are seen at the event streams' next poll.
func (s *Store) ListenClosed(ctx context.Context, fn func(jobID string)) error {
	retry := backoff.New(backoff.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second})
	for {
		// A connection that listened and was then lost starts the
		// backoff again: only failures in a row back off further.
		if listened, _ := s.listenClosed(ctx, fn); listened {
			retry.Reset()
		}
		if ctx.Err() != nil {
			return nil
		}
		if !backoff.Sleep(ctx, retry.Next()) {
			return nil
		}
	}
}

// listenClosed listens until ctx is done or the connection fails;
// listened says whether its LISTEN took effect.
func (s *Store) listenClosed(ctx context.Context, fn func(jobID string)) (listened bool, err error) {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	// A connection that listens never goes back to the pool.
	conn := pc.Hijack()
	defer conn.Close(context.WithoutCancel(ctx))
	var schema string
	if err := conn.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return false, fmt.Errorf("postgres: listen: %w", err)
	}
	if _, err := conn.Exec(ctx, `LISTEN `+closedChannel); err != nil {
		return false, fmt.Errorf("postgres: listen: %w", err)
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		if sch, id, ok := strings.Cut(n.Payload, " "); ok && sch == schema {
			fn(id)
		}
	}
}
