package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/internal/engine"
)

// This file serves ReconcileStale (failures.go) until its decision tree
// moves into the engine, which then calls engine.OutcomeTx's BumpCounters
// itself: delete the file with that move.

// counts is how many tasks of one job a batch moved to each terminal state.
type counts struct{ completed, failed int64 }

// bumpCounters adds each job's deltas to its counters (BumpCounters: job
// rows in id order, one pipelined round trip) and returns the jobs the
// new counts made ready to close (store.BecameReady), in id order.
func bumpCounters(ctx context.Context, pgTx pgx.Tx, deltas map[string]*counts) ([]string, error) {
	moved := make([]engine.CounterDelta, 0, len(deltas))
	for id, c := range deltas {
		moved = append(moved, engine.CounterDelta{JobID: id, Completed: c.completed, Failed: c.failed})
	}
	jobs, err := (&tx{tx: pgTx}).BumpCounters(ctx, moved)
	if err != nil {
		return nil, err
	}
	var ready []string
	for _, j := range jobs {
		if c := deltas[j.ID]; store.BecameReady(j, c.completed, c.failed) {
			ready = append(ready, j.ID)
		}
	}
	return ready, nil
}
