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
		err := s.listenClosed(ctx, fn)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			retry.Reset()
		}
		if !backoff.Sleep(ctx, retry.Next()) {
			return nil
		}
	}
}

// listenClosed listens until ctx is done or the connection fails.
func (s *Store) listenClosed(ctx context.Context, fn func(jobID string)) error {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// A connection that listens never goes back to the pool.
	conn := pc.Hijack()
	defer conn.Close(context.WithoutCancel(ctx))
	var schema string
	if err := conn.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return fmt.Errorf("postgres: listen: %w", err)
	}
	if _, err := conn.Exec(ctx, `LISTEN `+closedChannel); err != nil {
		return fmt.Errorf("postgres: listen: %w", err)
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if sch, id, ok := strings.Cut(n.Payload, " "); ok && sch == schema {
			fn(id)
		}
	}
}
