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
	"errors"
	"fmt"
	"time"
)

// Driver is what a store backend gives the engine.
type Driver interface {
	// Name prefixes the engine's errors ("sqlite", "postgres").
	Name() string
	// Begin starts a write transaction. Its primitives see its own
	// writes; Commit makes them durable before it returns.
	Begin(ctx context.Context) (Tx, error)
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
	StaleTx
	CreateTx
}

// Options tunes an Engine.
type Options struct {
	// Clock is the engine's clock, for tests; nil means time.Now.
	Clock func() time.Time
}

// Engine runs the store's decision trees over a Driver. It is safe for
// concurrent use: every call runs in a transaction of its own.
type Engine struct {
	drv   Driver
	clock func() time.Time
}

// New returns the engine of drv.
func New(drv Driver, opts Options) *Engine {
	clock := opts.Clock
	if clock == nil {
		clock = time.Now
	}
	return &Engine{drv: drv, clock: clock}
}

// now reads the engine's clock at the precision both drivers store
// (microseconds, UTC), so that a time written and read back compares
// equal.
func (e *Engine) now() time.Time {
	return e.clock().UTC().Truncate(time.Microsecond)
}

// inTx runs fn in a driver transaction, committing when fn returns nil
// and rolling back otherwise.
func (e *Engine) inTx(ctx context.Context, fn func(tx Tx) error) error {
	tx, err := e.drv.Begin(ctx)
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
