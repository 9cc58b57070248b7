package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/store/sqlite"
)

// TestOpenRefusesAFileInUse: a second Store on a file another holds is
// refused with ErrInUse and a message that says what to do, and the file
// is free again once the first is closed.
func TestOpenRefusesAFileInUse(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "warren.db")
	first, err := sqlite.Open(context.Background(), path)
	require.NoError(t, err)

	_, err = sqlite.Open(context.Background(), path)
	require.ErrorIs(t, err, sqlite.ErrInUse)
	require.EqualError(t, err, "sqlite: "+path+" is in use by another warren server (this process holds "+path+
		".lock): SQLite is the store of one server; stop the other one, or use PostgreSQL for several")

	other, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "other.db"))
	require.NoError(t, err, "another file is not locked")
	require.NoError(t, other.Close())

	require.NoError(t, first.Close())
	again, err := sqlite.Open(context.Background(), path)
	require.NoError(t, err, "closed, the file is free")
	require.NoError(t, again.Close())
}
