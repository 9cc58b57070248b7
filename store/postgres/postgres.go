// Package postgres is warren's PostgreSQL job store, for installations where
// several servers share one store: relays claim outbox rows with
// FOR UPDATE SKIP LOCKED, aggregators record outcomes with guarded
// transitions, and a job closes through a guarded state transition so that
// exactly one process closes it.
//
// Every table lives in the connection's current schema (the first schema of
// its search_path), so one database can hold several independent stores.
//
// Lock order: every transaction that locks both tasks and jobs locks the
// task rows first (in (job_id, task_id) order) and the job rows after (in id
// order). Keeping that one order everywhere is what keeps relays,
// aggregators, reconcilers and FinishJob, CancelJob, RedriveJob,
// ReopenTasks (ReopenTask) and UndoReopen from deadlocking one another. A claim with FOR UPDATE SKIP LOCKED (the
// relay's, the reconciler's) never waits for a task row, so the order it
// takes them in cannot close a cycle; it still locks job rows only after.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/internal/engine"
)

// defaultConnectTimeout bounds a connection attempt when the URL sets no
// connect_timeout, so that an unreachable database fails Open instead of
// hanging on the operating system's TCP timeout.
const defaultConnectTimeout = 10 * time.Second

// Store is the PostgreSQL job store. It is safe for concurrent use, by
// several goroutines and by several processes sharing one database.
type Store struct {
	// Engine makes every decision of the store (store/internal/engine);
	// the methods below read, and the driver gives it the primitives.
	*engine.Engine
	pool *pgxpool.Pool
}

var _ store.Store = (*Store)(nil)

// Options tunes a Store (OpenWith).
type Options struct {
	// Clock, when set, is the store's clock (Store.Now), read instead of
	// the database's: for tests, which move time as they please. Every
	// store opened on one database must then share the same Clock. nil
	// means the database's clock, which every server sharing the
	// database reads alike, whatever its own clock says.
	Clock func() time.Time
}

// Open connects to the database at url (a postgres:// URL or a key=value
// connection string, as pgx accepts), checks that it answers, reads its
// clock, and applies the schema migrations. An unreachable database is
// reported as one line that says so.
func Open(ctx context.Context, url string) (*Store, error) {
	return OpenWith(ctx, url, Options{})
}

// OpenWith is Open with opts.
func OpenWith(ctx context.Context, url string, opts Options) (*Store, error) {
	return openWith(ctx, url, engine.Options{Clock: opts.Clock})
}

// openWith is OpenWith with the engine's options: tests set the
// process's clock too (engine.Options.Local).
func openWith(ctx context.Context, url string, opts engine.Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: invalid database url: %w", err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, &unreachableError{addr: fmt.Sprintf("%s:%d", cfg.ConnConfig.Host, cfg.ConnConfig.Port), err: err}
	}
	s := &Store{pool: pool}
	s.Engine = engine.New(engineDriver{s}, opts)
	if _, err := s.Now(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	if err := s.Migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// unreachableError says in one line that the database did not answer, and
// keeps the cause for errors.Is and errors.As.
type unreachableError struct {
	addr string
	err  error
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("postgres: database at %s is unreachable: %s", e.addr, oneLine(e.err.Error()))
}

func (e *unreachableError) Unwrap() error { return e.err }

// oneLine folds pgx's multi-line errors (one line per address tried).
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: ping: %w", err)
	}
	return nil
}

// Close releases the store's connections. It waits for connections in use
// to be returned.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// rollback ends tx if it is still open. It runs deferred after Commit too,
// where it is a no-op; its error carries nothing the caller can act on.
func rollback(ctx context.Context, tx pgx.Tx) {
	_ = tx.Rollback(context.WithoutCancel(ctx))
}

// notFound wraps warren.ErrNotFound with the job's id.
func notFound(jobID string) error {
	return fmt.Errorf("postgres: job %q: %w", jobID, warren.ErrNotFound)
}

// isUniqueViolation reports whether err is PostgreSQL's unique_violation on
// the named constraint.
func isUniqueViolation(err error, constraint string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == constraint
}

// jobExists reports whether a job with that id exists.
func (s *Store) jobExists(ctx context.Context, q querier, jobID string) (bool, error) {
	var exists bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM jobs WHERE id = $1)`, jobID).Scan(&exists)
	if err != nil {
		return false, fmt.Errorf("postgres: look up job %q: %w", jobID, err)
	}
	return exists, nil
}

// querier is what the pool and a transaction have in common.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// utc converts a timestamp read from the database to UTC.
func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// splitRefs returns the job ids and task ids of refs, as unnest reads
// them.
func splitRefs(refs []store.TaskRef) (jobIDs []string, taskIDs []int64) {
	jobIDs, taskIDs = make([]string, len(refs)), make([]int64, len(refs))
	for i, r := range refs {
		jobIDs[i], taskIDs[i] = r.JobID, r.TaskID
	}
	return jobIDs, taskIDs
}
