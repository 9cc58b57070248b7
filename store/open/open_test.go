package open_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/store/open"
	"github.com/warrenhq/warren/store/postgres/pgtest"
)

func TestOpenSQLite(t *testing.T) {
	t.Parallel()
	s, err := open.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "w.db"))
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Ping(context.Background()))
}

func TestOpenPostgres(t *testing.T) {
	t.Parallel()
	s, err := open.Open(context.Background(), pgtest.URL(t))
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Ping(context.Background()))
}

func TestOpenRejectsUnknownSchemes(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"mysql://x", "", "sqlite://", "warren.db"} {
		_, err := open.Open(context.Background(), u)
		require.Error(t, err, u)
		require.NotContains(t, err.Error(), "\n")
	}
}

// A failed open returns a nil interface, so callers' nil checks work.
func TestOpenFailureReturnsNil(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"postgres://postgres@127.0.0.1:1/x?connect_timeout=2", "sqlite:///no/such/dir/w.db"} {
		s, err := open.Open(context.Background(), u)
		require.Error(t, err, u)
		require.Nil(t, s, u)
	}
}
