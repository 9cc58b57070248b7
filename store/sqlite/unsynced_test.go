package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// synchronousOf reads PRAGMA synchronous (1 NORMAL, 2 FULL) through q.
func synchronousOf(t *testing.T, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) int {
	t.Helper()
	var n int
	require.NoError(t, q.QueryRowContext(context.Background(), "PRAGMA synchronous").Scan(&n))
	return n
}

// A transaction begun withoutSync runs under synchronous=NORMAL, and the
// writer is back to FULL once it ends, committed or rolled back, so no
// later commit goes unsynced.
func TestAnUnsyncedTransactionLeavesTheWriterSynced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, filepath.Join(t.TempDir(), "warren.db"))
	require.Equal(t, 2, synchronousOf(t, s.w), "the writer opens with synchronous=FULL")
	for _, commit := range []bool{true, false} {
		tx, err := s.w.BeginTx(withoutSync(ctx), nil)
		require.NoError(t, err)
		require.Equal(t, 1, synchronousOf(t, tx), "inside an unsynced transaction")
		if commit {
			require.NoError(t, tx.Commit())
		} else {
			require.NoError(t, tx.Rollback())
		}
		require.Equal(t, 2, synchronousOf(t, s.w), "after the unsynced transaction ended (commit %v)", commit)
		tx, err = s.w.BeginTx(ctx, nil)
		require.NoError(t, err)
		require.Equal(t, 2, synchronousOf(t, tx), "a transaction begun without the mark")
		require.NoError(t, tx.Rollback())
	}
}

// A relay round's marks are the one write that commits without its own
// sync.
func TestARelayRoundWritesUnsynced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, filepath.Join(t.TempDir(), "warren.db"))
	s.relay <- struct{}{} // the round's slot, as BeginRelay takes it
	r := &relayTx{s: s}
	w, err := r.write(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, synchronousOf(t, w.tx))
	require.NoError(t, r.Rollback(ctx))
	require.Equal(t, 2, synchronousOf(t, s.w))
}
