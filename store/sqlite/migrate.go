package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"

	"github.com/warrenhq/warren/store/internal/sqlstore"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrations returns the embedded migrations in version order.
func migrations() ([]sqlstore.Migration, error) {
	return sqlstore.LoadMigrations(migrationFiles, "migrations")
}

// Migrate applies, in version order and in one transaction, the embedded
// migrations not yet recorded in warren_schema_migrations. Calling it again
// is a no-op. Several processes may call it at once: the write lock makes
// them take turns, and each sees what the others applied. A file migrated
// by a newer warren (an unknown version) is refused.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := migrations()
	if err != nil {
		return fmt.Errorf("sqlite: migrate: %w", err)
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS warren_schema_migrations (
			version    INTEGER PRIMARY KEY,
			name       TEXT    NOT NULL,
			applied_at INTEGER NOT NULL
		) STRICT`); err != nil {
			return err
		}
		applied, err := appliedVersions(ctx, tx)
		if err != nil {
			return err
		}
		known := make(map[int]bool, len(ms))
		for _, m := range ms {
			known[m.Version] = true
		}
		for v := range applied {
			if !known[v] {
				return fmt.Errorf("schema version %d is unknown to this binary (written by a newer warren?)", v)
			}
		}
		for _, m := range ms {
			if applied[m.Version] {
				continue
			}
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return fmt.Errorf("%s: %w", m.File, err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO warren_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
				m.Version, m.File, now().UnixMicro()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlite: migrate: %w", err)
	}
	return nil
}

// appliedVersions returns the versions recorded in warren_schema_migrations.
func appliedVersions(ctx context.Context, tx *sql.Tx) (map[int]bool, error) {
	rows, err := tx.QueryContext(ctx, `SELECT version FROM warren_schema_migrations`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	applied := make(map[int]bool)
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		applied[v] = true
	}
	return applied, rows.Err()
}
