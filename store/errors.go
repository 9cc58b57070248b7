package store

import (
	"context"
	"errors"
	"io"
	"net"
)

// ErrTransient marks an error of a store that could not do what it was
// asked for now but may later: the same call is worth retrying as it is.
// A driver wraps an error with it (fmt.Errorf("...: %w: %w", ErrTransient,
// err)) when Transient would not recognise the error otherwise.
var ErrTransient = errors.New("store temporarily unavailable")

// Transient reports whether err, from a Store method, says that the store
// could not answer for now, rather than that it refused what it was given.
// A transient error is retried as it is. Any other error would come back
// the same on every try: the data is at fault, and a caller that can tell
// which part of it (the aggregator, by splitting a batch of outcomes) sets
// that part aside.
//
// Transient are: ErrTransient; a context's error; a network error
// (net.Error, io.EOF, io.ErrUnexpectedEOF); an error that says it is safe
// to retry (a SafeToRetry method, as the PostgreSQL driver's errors
// raised before anything was sent have); a PostgreSQL error (an SQLState
// method) of any class but those that judge the data (see dataSQLState);
// and a SQLite error (a Code method returning a result code, as
// modernc.org/sqlite's errors have) of any code but those that judge the
// data (see dataSQLiteCode). The server errors that are not the data's
// (connection, rollback, resources, operator intervention, a missing
// table or privilege) are the store's own state: retrying waits for the
// store, or an operator, to fix it, rather than set aside every message
// the store cannot take meanwhile. Every other error is the data's.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	var (
		netErr net.Error
		retry  interface{ SafeToRetry() bool }
		pg     interface{ SQLState() string }
		lite   interface{ Code() int }
	)
	switch {
	case errors.Is(err, ErrTransient),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &netErr), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	case errors.As(err, &retry) && retry.SafeToRetry():
		return true
	case errors.As(err, &pg):
		return !dataSQLState(pg.SQLState())
	case errors.As(err, &lite):
		return !dataSQLiteCode(lite.Code())
	}
	return false
}

// dataSQLState reports whether a PostgreSQL error code judges the data
// given rather than the server's state: classes 21 (cardinality
// violation), 22 (data exception: a NUL byte in text is 22021, an invalid
// \u0000 in jsonb 22P05), 23 (integrity constraint violation) and 54
// (program limit exceeded: a value too large to index or store).
func dataSQLState(code string) bool {
	if len(code) != 5 {
		return false
	}
	switch code[:2] {
	case "21", "22", "23", "54":
		return true
	}
	return false
}

// SQLite's primary result codes that judge the data given or the
// statement (https://sqlite.org/rescode.html); every other code
// (SQLITE_BUSY, SQLITE_LOCKED, SQLITE_FULL, SQLITE_IOERR, ...) is the
// database's state.
const (
	sqliteError      = 1
	sqliteTooBig     = 18
	sqliteConstraint = 19
	sqliteMismatch   = 20
	sqliteRange      = 25
)

// dataSQLiteCode reports whether a SQLite result code, extended or
// primary, judges the data given rather than the database's state.
func dataSQLiteCode(code int) bool {
	switch code & 0xff {
	case sqliteError, sqliteTooBig, sqliteConstraint, sqliteMismatch, sqliteRange:
		return true
	}
	return false
}
