package sqlstore

import (
	"cmp"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Migration is one embedded schema change, read from a file named
// NNNN_what.sql.
type Migration struct {
	// Version is the file's NNNN, positive and unique among the
	// migrations.
	Version int
	// File is the file's name, NNNN_what.sql.
	File string
	// SQL is the file's content.
	SQL string
}

// Name returns the migration's file name without ".sql". The PostgreSQL
// store records a migration under its Name and the SQLite store under its
// File: each keeps what its schemas already hold.
func (m Migration) Name() string {
	return strings.TrimSuffix(m.File, ".sql")
}

// LoadMigrations returns the migrations of directory dir of fsys (its
// *.sql files) in version order. A file whose name does not start with a
// positive version and '_', or two files of one version, is an error: the
// driver's build is broken.
func LoadMigrations(fsys fs.FS, dir string) ([]Migration, error) {
	names, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		return nil, err
	}
	ms := make([]Migration, 0, len(names))
	for _, name := range names {
		file := path.Base(name)
		prefix, _, ok := strings.Cut(file, "_")
		v, err := strconv.Atoi(prefix)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must start with a positive version and '_'", file)
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, File: file, SQL: string(body)})
	}
	slices.SortFunc(ms, func(a, b Migration) int { return cmp.Compare(a.Version, b.Version) })
	for i := 1; i < len(ms); i++ {
		if ms[i].Version == ms[i-1].Version {
			return nil, fmt.Errorf("migrations %s and %s share a version", ms[i-1].File, ms[i].File)
		}
	}
	return ms, nil
}
