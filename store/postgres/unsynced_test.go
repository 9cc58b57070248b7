package postgres_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/store/postgres"
)

// A relay round's transaction commits without waiting for the log's
// flush (its marks' loss is harmless: see BeginRelay); every other
// transaction, on the same pool after it, waits.
func TestOnlyARelayRoundCommitsWithoutTheFlush(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for range 3 {
		v, err := postgres.SynchronousCommitOf(b.ctx, b.store, true)
		require.NoError(t, err)
		require.Equal(t, "off", v, "a relay round")
		v, err = postgres.SynchronousCommitOf(b.ctx, b.store, false)
		require.NoError(t, err)
		require.Equal(t, "on", v, "another transaction after a relay round")
	}
}
