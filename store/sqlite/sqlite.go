// Package sqlite is warren's embedded job store: a single SQLite file,
// opened with the pure Go driver modernc.org/sqlite (no cgo).
//
// One server process owns a file: Open locks it (an flock(2) on
// PATH.lock) and a second Store on the same file, in this process or
// another, is refused with ErrInUse until the first is closed. Writes go through a single connection,
// so write transactions are serialised in-process and never fail with
// SQLITE_BUSY; reads use a pool of connections that see the last committed
// state (WAL mode). Every commit is durable before it returns
// (synchronous=FULL), so a result acknowledged after ApplyOutcomes is never
// lost by a crash; only a relay round's marks, whose loss is harmless,
// commit without a sync of their own (withoutSync).
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite" // also registers the "sqlite" driver
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/warrenhq/warren/internal/backoff"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/internal/engine"
)

// busyTimeout is how long a connection waits for another process's lock
// before failing: not a second Store (ErrInUse refuses it), but another
// program on the file, such as the sqlite3 shell.
const busyTimeout = 10 * time.Second

// readers is the size of the read connection pool.
const readers = 4

// ErrInUse is the error of Open when another Store holds the file (its
// lock file, PATH.lock): SQLite is the store of one server. Stop the other
// server, or use PostgreSQL for several.
var ErrInUse = errors.New("sqlite: the file is in use by another warren store")

// inUseError is ErrInUse with the file and who holds it.
type inUseError struct{ path, holder string }

func (e *inUseError) Error() string {
	return fmt.Sprintf("sqlite: %s is in use by another warren server (%s holds %s.lock): SQLite is the store of one server; "+
		"stop the other one, or use PostgreSQL for several", e.path, e.holder, e.path)
}

func (e *inUseError) Is(target error) bool { return target == ErrInUse }

// Store is a job store in one SQLite file. It implements store.Store and
// is safe for concurrent use by one process. It holds the file's lock
// (ErrInUse) from Open to Close.
type Store struct {
	// Engine makes every decision of the store (store/internal/engine);
	// the methods below read, and the driver gives it the primitives.
	*engine.Engine
	w *sql.DB // one connection: every write transaction
	// stmts are the writer's prepared statements by query (writerStmt).
	stmtsMu sync.Mutex
	stmts   map[string]*sql.Stmt
	r       *sql.DB // a pool for reads
	// relay serialises the relay rounds: a task is offered to one
	// publisher at a time (see engineDriver.BeginRelay).
	relay chan struct{}
	// unlock releases the file's lock (lockFile).
	unlock func() error
}

var _ store.Store = (*Store)(nil)

// Options tunes a Store (OpenWith).
type Options struct {
	// Clock, when set, is the store's clock (Store.Now), read instead of
	// the process's: for tests, which move time as they please. nil means
	// the process's clock.
	Clock func() time.Time
}

// Open opens the SQLite file at path, creating it if needed, applies the
// schema migrations that are missing and returns the store. path is a file
// name; ":memory:" and names containing '?' are rejected because the store
// needs one file shared by its writer and reader connections.
func Open(ctx context.Context, path string) (*Store, error) {
	return OpenWith(ctx, path, Options{})
}

// OpenWith is Open with opts.
func OpenWith(ctx context.Context, path string, opts Options) (*Store, error) {
	if path == "" || path == ":memory:" || strings.Contains(path, "?") {
		return nil, fmt.Errorf("sqlite: open %q: need a file path without '?'", path)
	}
	unlock, err := lockFile(path)
	if err != nil {
		return nil, err
	}
	s, err := openLocked(ctx, path, opts)
	if err != nil {
		_ = unlock()
		return nil, err
	}
	s.unlock = unlock
	return s, nil
}

// openLocked opens the file once its lock is held.
func openLocked(ctx context.Context, path string, opts Options) (*Store, error) {
	timeout := fmt.Sprintf("_pragma=busy_timeout(%d)", busyTimeout.Milliseconds())
	w := openDB(path + "?_txlock=immediate&" + timeout +
		"&_pragma=foreign_keys(1)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	// The writer connects first so the file exists and is in WAL mode
	// before any reader opens it.
	if err := connectWriter(ctx, w); err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	r := openDB(path + "?" + timeout + "&_pragma=foreign_keys(1)&_pragma=query_only(1)")
	r.SetMaxOpenConns(readers)
	r.SetMaxIdleConns(readers)
	s := &Store{w: w, r: r, relay: make(chan struct{}, 1)}
	s.Engine = engine.New(engineDriver{s}, engine.Options{Clock: opts.Clock})
	if _, err := s.Now(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.Migrate(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.prepareWriter(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// connectWriter opens the writer's connection. Switching a new file to WAL
// needs an exclusive lock, and SQLite reports SQLITE_BUSY for it without
// waiting on the busy timeout when several processes open the same new
// file at once, so a busy answer is retried, within busyTimeout.
func connectWriter(ctx context.Context, w *sql.DB) error {
	deadline := time.Now().Add(busyTimeout)
	retry := backoff.New(backoff.Policy{Min: 5 * time.Millisecond, Max: 200 * time.Millisecond})
	for {
		err := w.PingContext(ctx)
		if err == nil || !isBusy(err) || time.Now().After(deadline) {
			return err
		}
		if !backoff.Sleep(ctx, retry.Next()) {
			return err
		}
	}
}

// isBusy reports whether err is SQLite's SQLITE_BUSY (the primary code,
// whatever its extended code).
func isBusy(err error) bool {
	var e *sqlite.Error
	return errors.As(err, &e) && e.Code()&0xff == sqlite3.SQLITE_BUSY
}

// Ping checks that both the writer and a reader connection answer.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.w.PingContext(ctx); err != nil {
		return fmt.Errorf("sqlite: ping: %w", err)
	}
	if err := s.r.PingContext(ctx); err != nil {
		return fmt.Errorf("sqlite: ping: %w", err)
	}
	return nil
}

// Close closes every connection of the store. Calls in flight fail.
func (s *Store) Close() error {
	s.stmtsMu.Lock()
	for _, st := range s.stmts {
		st.Close()
	}
	s.stmts = nil
	s.stmtsMu.Unlock()
	err := errors.Join(s.r.Close(), s.w.Close())
	if s.unlock != nil {
		err = errors.Join(err, s.unlock())
		s.unlock = nil
	}
	return err
}

// writerStmt returns query as the writer prepared it at open
// (prepareWriter), or nil when it is not one of writerQueries.
func (s *Store) writerStmt(query string) *sql.Stmt {
	s.stmtsMu.Lock()
	defer s.stmtsMu.Unlock()
	return s.stmts[query]
}

// writerQueries are the statements of the store's hot paths (recording
// outcomes, marking tasks queued), which the writer prepares once.
var writerQueries = append([]string{readOutcomeTasksSQL, bumpCountersSQL, markQueuedSQL,
	idleJobsSQL, startJobsSQL}, append(slices.Collect(maps.Values(writeOutcomesQueries)), slices.Collect(maps.Values(writeAttemptsQueries))...)...)

// prepareWriter prepares writerQueries on the writer connection. It runs
// at open, before any transaction could hold the one connection.
func (s *Store) prepareWriter(ctx context.Context) error {
	s.stmtsMu.Lock()
	defer s.stmtsMu.Unlock()
	s.stmts = make(map[string]*sql.Stmt, len(writerQueries))
	for _, q := range writerQueries {
		st, err := s.w.PrepareContext(ctx, q)
		if err != nil {
			return fmt.Errorf("sqlite: prepare: %w", err)
		}
		s.stmts[q] = st
	}
	return nil
}

// inTx runs fn in a write transaction (BEGIN IMMEDIATE on the single
// writer connection) and commits when fn returns nil.
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// querier is what the read helpers need from *sql.DB and *sql.Tx, so that a
// write transaction can read its own writes.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// now is the process's clock, at the precision the store keeps
// (microseconds, UTC), for the migrations' bookkeeping (applied_at) alone:
// every other time the store writes or compares is the engine's clock.
func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// micros is a nullable timestamp as the schema stores it.
func micros(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixMicro()
}

// timeOf is the inverse of micros.
func timeOf(n sql.NullInt64) *time.Time {
	if !n.Valid {
		return nil
	}
	t := time.UnixMicro(n.Int64).UTC()
	return &t
}
