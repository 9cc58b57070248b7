package engine

import (
	"slices"
	"time"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/protocol"
	"github.com/warrenhq/warren/store"
)

// What the drivers' reads (store.Store's list and count methods, which
// decide nothing) share, so that both answer alike.

// PageSize returns the page size for a requested limit: limit, or
// store.DefaultPageSize when limit is not positive, as the store.Store
// methods whose doc says so take it.
func PageSize(limit int) int {
	if limit <= 0 {
		return store.DefaultPageSize
	}
	return limit
}

// SortQueues returns the work queue names queues (as a driver reads them
// from its jobs, "" meaning the default queue) with the default queue
// named, each once, sorted (store.Store.OpenQueues).
func SortQueues(queues []string) []string {
	for i, q := range queues {
		queues[i] = protocol.QueueOrDefault(q)
	}
	slices.Sort(queues)
	return slices.Compact(queues)
}

// TimelineRows are the rows of a driver's grouped count of a job's
// finished tasks, each (bucket index, task state, count): *sql.Rows and
// pgx.Rows are.
type TimelineRows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// FillTimeline returns span's buckets (store.Store.TaskTimeline) with the
// counts of rows added, each row's bucket index clamped into the span,
// its tasks counted as completed or else failed. The caller closes rows.
func FillTimeline(span store.TimelineSpan, rows TimelineRows) ([]store.TimelineBucket, error) {
	buckets := timelineBuckets(span)
	for rows.Next() {
		var (
			i, n  int64
			state string
		)
		if err := rows.Scan(&i, &state, &n); err != nil {
			return nil, err
		}
		b := &buckets[min(max(i, 0), int64(span.N-1))]
		if warren.TaskState(state) == warren.TaskCompleted {
			b.Completed += n
		} else {
			b.Failed += n
		}
	}
	return buckets, rows.Err()
}

// timelineBuckets returns span's N empty buckets, in order.
func timelineBuckets(span store.TimelineSpan) []store.TimelineBucket {
	out := make([]store.TimelineBucket, span.N)
	for i := range out {
		out[i].Start = span.Start.Add(time.Duration(i) * span.Bucket)
	}
	return out
}
