package sqlite

import (
	"context"
	"database/sql"

	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/internal/engine"
)

// This file serves ReconcileStale (failures.go) until its decision tree
// moves into the engine, which then calls engine.OutcomeTx's BumpCounters
// itself: delete the file with that move.

// counts is how many tasks of one job a transaction moved to each
// terminal state.
type counts struct{ completed, failed int64 }

// jobCounts is one job's counts.
type jobCounts struct {
	id string
	counts
}

// bumpCounters adds each job's counts to its counters (BumpCounters),
// skipping jobs without any, and returns the jobs the new counters made
// ready to close (store.BecameReady), in job id order.
func bumpCounters(ctx context.Context, sqlTx *sql.Tx, deltas []jobCounts) ([]string, error) {
	moved := make([]engine.CounterDelta, 0, len(deltas))
	byID := make(map[string]counts, len(deltas))
	for _, d := range deltas {
		if d.completed != 0 || d.failed != 0 {
			moved = append(moved, engine.CounterDelta{JobID: d.id, Completed: d.completed, Failed: d.failed})
			byID[d.id] = d.counts
		}
	}
	jobs, err := (&tx{tx: sqlTx}).BumpCounters(ctx, moved)
	if err != nil {
		return nil, err
	}
	var ready []string
	for _, j := range jobs {
		if c := byID[j.ID]; store.BecameReady(j, c.completed, c.failed) {
			ready = append(ready, j.ID)
		}
	}
	return ready, nil
}
