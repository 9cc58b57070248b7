package sqlite

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
	if err := s.jobExists(ctx, jobID); err != nil {
		return nil, fmt.Errorf("sqlite: task timeline of %s: %w", jobID, err)
	}
	// finished_at is in microseconds; the division truncates towards zero,
	// which only matters for tasks before the span, clamped anyway.
	rows, err := s.r.QueryContext(ctx, `SELECT (finished_at - ?1) / ?2 AS bucket, state, count(*) FROM tasks
		WHERE job_id = ?3 AND task_id > 0 AND state IN ('completed', 'failed') AND finished_at IS NOT NULL
		GROUP BY bucket, state`, span.Start.UnixMicro(), span.Bucket.Microseconds(), jobID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: task timeline of %s: %w", jobID, err)
	}
	defer rows.Close()
	buckets, err := engine.FillTimeline(span, rows)
	if err != nil {
		return nil, fmt.Errorf("sqlite: task timeline of %s: %w", jobID, err)
	}
	return buckets, nil
}
