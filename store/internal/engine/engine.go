// Package engine is the job store's one engine: every decision the store
// makes (judge an outcome and default its fields, bump counters, reopen
// for a redrive or a replay, cancel, finish, pick stale tasks, create a
// job) is written here once, in Go, and runs inside a transaction of a
// Driver. A driver (store/sqlite, store/postgres) exposes set-wise
// primitives (lock and read these rows, write these transitions, bump
// these counters, claim this share) and decides nothing, so that the
// rules cannot drift between SQL dialects. The conformance suite in
// store/storetest holds every driver to one contract.
//
// This is River's shape (riverdriver's Executor and ExecutorTx): the
// engine is the client's Go code, a driver the thin layer below it.
package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"
	"time"
)

// Driver is what a store backend gives the engine: every method the
// engine calls on it is here, or in an interface it embeds, and no other
// (River's riverdriver.Driver and Executor). Where the backends differ in
// strategy (SQLite has one writer for the whole process and keeps work
// off it; PostgreSQL runs transactions side by side), the method is still
// here, and a driver that needs nothing special implements it plainly, as
// its doc says.
type Driver interface {
	// Executor runs the primitives that are atomic by themselves outside
	// any explicit transaction.
	Executor

	// Name prefixes the engine's errors ("sqlite", "postgres").
	Name() string
	// ReadClock reads the database's clock: the one clock every process
	// sharing the database reads alike (PostgreSQL's clock_timestamp();
	// SQLite's database is one process's, and so is its clock). The
	// engine reads it seldom (see Clock): a reading may cost a round trip.
	ReadClock(ctx context.Context) (time.Time, error)

	// Begin starts a write transaction. Its primitives see its own
	// writes; Commit makes them durable before it returns.
	Begin(ctx context.Context) (Tx, error)
	// BeginRelay starts a relay round (RelayRound). Its claim is offered
	// to no other round of the store until it ends. A driver with nothing
	// special returns a transaction of Begin, which holds its claim's row
	// locks while the round publishes. A driver whose one writer a round
	// must not hold while the broker confirms (SQLite) serialises the
	// store's rounds itself, reads the claim outside any write
	// transaction, and writes the marks in a transaction begun at the
	// first of them, after publish; MarkQueued's generation guard leaves
	// alone a task redriven meanwhile.
	BeginRelay(ctx context.Context) (RelayRoundTx, error)
	// BeginPause starts the write transaction of a pause (PauseJob,
	// PauseQueue): it waits until no relay round of the store is in
	// flight, and holds off new rounds until it ends, so that every
	// round after it reads the pause and none before it still publishes.
	// SQLite takes the store's relay slot before its one writer;
	// PostgreSQL takes an advisory lock of its schema exclusively, of
	// which each round holds a shared one (PendingJobs).
	BeginPause(ctx context.Context) (Tx, error)
	// BeginDelete starts the write transaction of a retention deletion
	// (DeleteExpiredJobs, DeleteJob), in which DeleteJobs deletes job rows
	// and leaves their task rows. A driver with nothing special returns a
	// transaction of Begin. A driver whose schema would delete a job's
	// task rows with it (SQLite: a cascading foreign key, which would hold
	// the one writer for as long as a large job takes) returns one that
	// deletes the job rows alone (SQLite: foreign keys off).
	BeginDelete(ctx context.Context) (Tx, error)
	// StageJob readies the create of a job of idempotency key key ("" for
	// none) and tasks before its write transaction begins (CreateJob). A
	// driver with nothing special returns tasks as they are, reads
	// nothing, and its InsertJob finds a taken key. A driver whose write
	// transaction must stay short (SQLite: one writer, which a slow upload
	// read inside it would stall) looks the key up outside any write
	// transaction and returns the job that holds it, if one does, without
	// reading tasks (a replay reads no task); else it reads tasks to
	// their end into storage of its own (disk past a bound, not memory),
	// to be read once in the transaction. The first error tasks yields is
	// returned as it is.
	StageJob(ctx context.Context, key string, tasks iter.Seq2[json.RawMessage, error]) (StagedJob, error)
	// Peek returns the reader that retention (DeleteExpiredJobs,
	// PurgeDeletedTasks) reads its candidates through first, locking
	// nothing and outside any write transaction, so that a sweep with
	// nothing to do begins none; or nil, when a look first would save
	// nothing. A driver with nothing special returns nil: its
	// transaction's reads skip the rows others hold, and a look would only
	// add a round trip. A driver with one writer (SQLite) returns a reader,
	// so that an idle sweep never holds up a write.
	Peek() RetentionReader
}

// Executor holds the primitives a Driver runs outside any explicit
// transaction, each atomic by itself (River's Executor beside its
// ExecutorTx): they read on the driver's read connections, or are one
// statement, so that they never hold a write transaction open.
type Executor interface {
	CloseCandidateReader
	DeliveryExecutor
}

// Tx is a driver's write transaction: the primitives of every decision
// tree, each group declared beside the tree that uses it.
type Tx interface {
	// Commit makes the transaction's writes durable.
	Commit(ctx context.Context) error
	// Rollback discards the transaction's writes. It is a no-op after
	// Commit.
	Rollback(ctx context.Context) error

	CloseTx
	OutcomeTx
	RelayTx
	ReopenTx
	ReduceTx
	StaleTx
	CreateTx
	FollowUpTx
	SpawnTx
	SpawnPartTx
	PauseTx
}

// Options tunes an Engine.
type Options struct {
	// Clock, when set, is the store's clock, read instead of the
	// database's: for tests, which move time as they please. Every
	// process sharing a database must then read the same Clock. nil
	// means the database's clock (Driver.ReadClock, see Clock).
	Clock func() time.Time
	// Local is the process's clock, which measures the time since the
	// engine last read the database's; nil means time.Now. Only its pace
	// matters, never the time it tells: tests set it hours off to show
	// that a server's clock changes nothing.
	Local func() time.Time
}

// Engine runs the store's decision trees over a Driver. It is safe for
// concurrent use: every call runs in a transaction of its own. A store
// has one: besides its clock, it keeps what one relay round passes to the
// next.
type Engine struct {
	drv   Driver
	clock *Clock
	// turn is the next relay round's turn (served): it moves by one per
	// round, so that the jobs take turns at being served first.
	turn atomic.Int64
	// openJobs is how many open jobs the last relay round found, for the
	// next one's pendingCap.
	openJobs atomic.Int64

	// groupMu guards the creates waiting for a group transaction
	// (createGrouped), and grouping, whether one leads a group now.
	groupMu  sync.Mutex
	waiting  []*createReq
	grouping bool
}

// New returns the engine of drv. Its clock tells the process's time until
// the first transaction or Now reads the database's: a driver's Open
// calls Now.
func New(drv Driver, opts Options) *Engine {
	return &Engine{drv: drv, clock: newClock(drv.ReadClock, opts)}
}

// Now returns the store's clock (see Clock): the time the store writes
// and compares stored times with, which the times a caller passes in
// (store.Staleness, store.Expiry, store.DeliveryClaim,
// store.DeliveryAttempt) must be read from. It reads the database's clock
// when the last reading is a minute old, and fails only when it never
// could.
func (e *Engine) Now(ctx context.Context) (time.Time, error) {
	if err := e.clock.Sync(ctx); err != nil {
		return time.Time{}, e.errorf(err, "read the clock")
	}
	return e.clock.Now(), nil
}

// now reads the engine's clock at the precision both drivers store
// (microseconds, UTC), so that a time written and read back compares
// equal.
func (e *Engine) now() time.Time {
	return e.clock.Now()
}

// inTx runs fn in a driver transaction, committing when fn returns nil
// and rolling back otherwise.
func (e *Engine) inTx(ctx context.Context, fn func(tx Tx) error) error {
	return e.inTxBegun(ctx, e.drv.Begin, fn)
}

// inTxBegun is inTx with a transaction that begin starts. The clock is
// synced first, when it is time to, so that fn's readings are the
// database's.
func (e *Engine) inTxBegun(ctx context.Context, begin func(ctx context.Context) (Tx, error), fn func(tx Tx) error) error {
	if err := e.clock.Sync(ctx); err != nil {
		return fmt.Errorf("read the clock: %w", err)
	}
	tx, err := begin(ctx)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		if rerr := ignoreDone(tx.Rollback(context.WithoutCancel(ctx))); rerr != nil {
			return errors.Join(err, rerr)
		}
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// ignoreDone drops the error of a rollback that found nothing to roll
// back; any other rollback error is worth reporting with fn's.
func ignoreDone(err error) error {
	if errors.Is(err, ErrTxDone) {
		return nil
	}
	return err
}

// ErrTxDone is what a driver's Rollback returns (wrapped) for a
// transaction that is already committed or rolled back.
var ErrTxDone = errors.New("transaction already done")

// errorf prefixes an error with the driver's name and what failed.
func (e *Engine) errorf(err error, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %w", e.drv.Name(), fmt.Sprintf(format, args...), err)
}
