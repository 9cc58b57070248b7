package postgres_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/postgres"
	"github.com/warrenhq/warren/store/postgres/pgtest"
	"github.com/warrenhq/warren/store/storetest"
)

// TestConformance runs the store conformance suite, each subtest against a
// store in a schema of its own.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, func(t *testing.T) store.Store {
		s, err := postgres.Open(t.Context(), pgtest.URL(t))
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		return s
	})
}
