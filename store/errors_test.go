package store_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/store"
)

// safeToRetry is an error that says whether it is safe to retry, as the
// PostgreSQL driver's are.
type safeToRetry bool

func (e safeToRetry) Error() string     { return "conn busy" }
func (e safeToRetry) SafeToRetry() bool { return bool(e) }

// sqliteError has a result code the way modernc.org/sqlite's errors do.
type sqliteError int

func (e sqliteError) Error() string { return fmt.Sprintf("sqlite error %d", int(e)) }
func (e sqliteError) Code() int     { return int(e) }

func TestTransient(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error { return fmt.Errorf("postgres: apply outcomes: %w", err) }
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"no error", nil, false},
		{"marked by a driver", wrap(fmt.Errorf("%w: %w", store.ErrTransient, errors.New("busy"))), true},
		{"context cancelled", wrap(context.Canceled), true},
		{"deadline", wrap(context.DeadlineExceeded), true},
		{"connection reset", wrap(&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}), true},
		{"connection cut mid-message", wrap(io.ErrUnexpectedEOF), true},
		{"safe to retry", wrap(safeToRetry(true)), true},
		{"a NUL byte in text", wrap(&pgconn.PgError{Code: "22021"}), false},
		{"a NUL escape in jsonb", wrap(&pgconn.PgError{Code: "22P05"}), false},
		{"a number out of range", wrap(&pgconn.PgError{Code: "22003"}), false},
		{"a unique violation", wrap(&pgconn.PgError{Code: "23505"}), false},
		{"a row twice in one statement", wrap(&pgconn.PgError{Code: "21000"}), false},
		{"a value too large", wrap(&pgconn.PgError{Code: "54000"}), false},
		{"not safe to retry, but the data's", wrap(fmt.Errorf("%w: %w", safeToRetry(false), &pgconn.PgError{Code: "22021"})), false},
		{"serialization failure", wrap(&pgconn.PgError{Code: "40001"}), true},
		{"deadlock", wrap(&pgconn.PgError{Code: "40P01"}), true},
		{"disk full", wrap(&pgconn.PgError{Code: "53100"}), true},
		{"admin shutdown", wrap(&pgconn.PgError{Code: "57P01"}), true},
		{"read-only after a failover", wrap(&pgconn.PgError{Code: "25006"}), true},
		{"a table missing", wrap(&pgconn.PgError{Code: "42P01"}), true},
		{"SQLite busy", wrap(sqliteError(5)), true},
		{"SQLite busy, extended", wrap(sqliteError(5 | 2<<8)), true},
		{"SQLite disk full", wrap(sqliteError(13)), true},
		{"SQLite constraint", wrap(sqliteError(19)), false},
		{"SQLite too big", wrap(sqliteError(18)), false},
		{"anything else", wrap(errors.New("failed to encode args[3]")), false},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, store.Transient(tt.err), tt.name)
	}
}
