package postgres

import (
	"context"
	"embed"
	"fmt"

	"github.com/warrenhq/warren/store/internal/sqlstore"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrate applies the embedded migrations that the current schema (the
// first schema of the connection's search_path) has not applied yet, in
// version order and in one transaction. It holds a transaction-scoped
// advisory lock keyed on the schema, so several servers starting at once
// apply each migration exactly once; calling it again is a no-op.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := sqlstore.LoadMigrations(migrationFiles, "migrations")
	if err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	defer rollback(ctx, tx)

	var schema *string
	if err := tx.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	if schema == nil {
		return fmt.Errorf("postgres: migrate: no schema of the search_path exists; create it first")
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('warren.migrate'), hashtext(current_schema()))`); err != nil {
		return fmt.Errorf("postgres: migrate: take the migration lock: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS warren_schema_migrations (
		version    bigint PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`); err != nil {
		return fmt.Errorf("postgres: migrate: create the migrations table: %w", err)
	}

	applied := make(map[int]bool)
	rows, err := tx.Query(ctx, `SELECT version FROM warren_schema_migrations`)
	if err != nil {
		return fmt.Errorf("postgres: migrate: read applied migrations: %w", err)
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return fmt.Errorf("postgres: migrate: read applied migrations: %w", err)
		}
		applied[v] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("postgres: migrate: read applied migrations: %w", err)
	}

	for _, m := range ms {
		if applied[m.Version] {
			continue
		}
		// Without arguments pgx sends the simple protocol, which runs every
		// statement of the file.
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return fmt.Errorf("postgres: migrate: apply %s: %w", m.Name(), err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO warren_schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name()); err != nil {
			return fmt.Errorf("postgres: migrate: record %s: %w", m.Name(), err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres: migrate: commit: %w", err)
	}
	return nil
}
