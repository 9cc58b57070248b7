// Package pgtest gives tests a PostgreSQL database of their own: a fresh
// schema in the test database, dropped when the test ends, so tests of any
// package run in parallel against one server and leave nothing behind.
//
// The server is named by TEST_DATABASE_URL, by default
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultURL is the test database used when TEST_DATABASE_URL is not set.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// adminTimeout bounds creating and dropping a schema.
const adminTimeout = 30 * time.Second

// BaseURL returns TEST_DATABASE_URL, or DefaultURL when it is not set.
func BaseURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// URL creates a schema with a random name ("wt_" and 16 hex digits) in the
// test database, registers its drop (CASCADE) with t.Cleanup, and returns a
// URL whose search_path is that schema. Every store opened with the URL
// shares the schema; stores opened with different URLs never see each
// other. Cleanups run last-registered first, so a store closed in a cleanup
// registered after URL is closed before its schema is dropped. URL fails
// the test when the database cannot be reached.
func URL(t testing.TB) string {
	t.Helper()
	base := BaseURL()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("pgtest: TEST_DATABASE_URL is not a URL: %v", err)
	}
	var suffix [8]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	schema := "wt_" + hex.EncodeToString(suffix[:])
	ident := pgx.Identifier{schema}.Sanitize()

	exec(t, base, "CREATE SCHEMA "+ident)
	t.Cleanup(func() { exec(t, base, "DROP SCHEMA IF EXISTS "+ident+" CASCADE") })

	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// exec runs one statement on its own connection to the database at dsn.
func exec(t testing.TB, dsn, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("pgtest: connect to the test database (set TEST_DATABASE_URL): %v", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("pgtest: %s: %v", sql, err)
	}
}
