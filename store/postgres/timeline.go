package postgres

import (
	"context"
	"fmt"

	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/internal/engine"
)

// TaskTimeline counts job jobID's completed and failed map tasks (never
// its reduce task, as its counters) by the bucket
// of span their finished_at falls in, grouped in SQL; buckets out of the
// span are clamped into it (store.TimelineSpan.Fill).
func (s *Store) TaskTimeline(ctx context.Context, jobID string, span store.TimelineSpan) ([]store.TimelineBucket, error) {
	exists, err := s.jobExists(ctx, s.pool, jobID)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, notFound(jobID)
	}
	rows, err := s.pool.Query(ctx, `SELECT floor(extract(epoch FROM finished_at - $1::timestamptz) * 1000000 / $2)::bigint AS bucket,
		state, count(*) FROM tasks
		WHERE job_id = $3 AND task_id > 0 AND state IN ('completed', 'failed') AND finished_at IS NOT NULL
		GROUP BY bucket, state`, span.Start, span.Bucket.Microseconds(), jobID)
	if err != nil {
		return nil, fmt.Errorf("postgres: task timeline of %q: %w", jobID, err)
	}
	defer rows.Close()
	buckets, err := engine.FillTimeline(span, rows)
	if err != nil {
		return nil, fmt.Errorf("postgres: task timeline of %q: %w", jobID, err)
	}
	return buckets, nil
}
