// Package open opens the job store a database URL names:
// "sqlite://PATH" (the embedded default; "sqlite:///abs/path" for an
// absolute path) or "postgres://..." / "postgresql://...".
package open

import (
	"context"
	"fmt"
	"strings"

	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/postgres"
	"github.com/warrenhq/warren/store/sqlite"
)

// DefaultURL is the store used when none is configured.
const DefaultURL = "sqlite://./warren.db"

// Open opens and migrates the store that rawURL names. Its errors are one
// line that says what is wrong.
func Open(ctx context.Context, rawURL string) (store.Store, error) {
	switch {
	case strings.HasPrefix(rawURL, "sqlite://"):
		path := strings.TrimPrefix(rawURL, "sqlite://")
		if path == "" {
			return nil, fmt.Errorf("database URL %q has no file path (want sqlite://PATH)", rawURL)
		}
		s, err := sqlite.Open(ctx, path)
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return s, nil
	case strings.HasPrefix(rawURL, "postgres://"), strings.HasPrefix(rawURL, "postgresql://"):
		s, err := postgres.Open(ctx, rawURL)
		if err != nil {
			return nil, err
		}
		return s, nil
	default:
		// Only the scheme: the rest may hold a password.
		scheme, _, _ := strings.Cut(rawURL, "://")
		if len(scheme) > 20 || strings.ContainsAny(scheme, "@:/") {
			scheme = "(none)"
		}
		return nil, fmt.Errorf("database URL: unsupported scheme %q (want sqlite://PATH or postgres://...)", scheme)
	}
}
