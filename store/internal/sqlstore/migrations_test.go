package sqlstore_test

import (
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/store/internal/sqlstore"
)

func TestLoadMigrationsInVersionOrder(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{
		"m/0010_later.sql": {Data: []byte("CREATE TABLE b ();")},
		"m/0002_first.sql": {Data: []byte("CREATE TABLE a ();")},
		"m/README":         {Data: []byte("not a migration")},
		"other/0001_x.sql": {Data: []byte("elsewhere")},
	}
	ms, err := sqlstore.LoadMigrations(fsys, "m")
	require.NoError(t, err)
	require.Equal(t, []sqlstore.Migration{
		{Version: 2, File: "0002_first.sql", SQL: "CREATE TABLE a ();"},
		{Version: 10, File: "0010_later.sql", SQL: "CREATE TABLE b ();"},
	}, ms)
	require.Equal(t, "0002_first", ms[0].Name())
}

func TestLoadMigrationsRefusesBadNames(t *testing.T) {
	t.Parallel()
	for _, file := range []string{"init.sql", "0000_zero.sql", "-1_negative.sql", "x1_init.sql", "0001.sql"} {
		_, err := sqlstore.LoadMigrations(fstest.MapFS{"m/" + file: {}}, "m")
		require.ErrorContains(t, err, "migration "+file+": name must start with a positive version", "file %s", file)
	}
}

func TestLoadMigrationsRefusesASharedVersion(t *testing.T) {
	t.Parallel()
	_, err := sqlstore.LoadMigrations(fstest.MapFS{"m/0001_a.sql": {}, "m/1_b.sql": {}}, "m")
	require.ErrorContains(t, err, "share a version")
}
