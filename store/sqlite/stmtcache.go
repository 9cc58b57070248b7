package sqlite

import (
	"container/list"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"

	"modernc.org/sqlite"
)

// stmtCacheSize bounds the prepared statements each connection keeps.
// The store's statements are a few dozen fixed texts and the batch forms
// of a few of them (one per batch size); past the bound, the least
// recently used idle one is finalized.
const stmtCacheSize = 256

// openDB opens dsn with modernc's driver behind a per-connection cache of
// prepared statements. database/sql prepares, runs and finalizes every
// query a program passes as text, and SQLite's parser and code generator
// were a third of what a small job cost the store (the profile in
// docs/performance.md, "Many small jobs"): with the cache, each
// connection compiles a statement once and runs it again from there.
func openDB(dsn string) *sql.DB {
	return sql.OpenDB(cachingConnector{dsn: dsn})
}

// cachingConnector opens modernc connections wrapped in cachingConn.
type cachingConnector struct{ dsn string }

// Connect implements driver.Connector.
func (c cachingConnector) Connect(context.Context) (driver.Conn, error) {
	dc, err := (&sqlite.Driver{}).Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return newCachingConn(dc)
}

// Driver implements driver.Connector.
func (cachingConnector) Driver() driver.Driver { return &sqlite.Driver{} }

// inner is what the store needs of a modernc connection.
type inner interface {
	driver.Conn
	driver.ConnPrepareContext
	driver.ConnBeginTx
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

// cachingConn is a modernc connection whose PrepareContext returns a
// cached statement. It does not implement driver.ExecerContext or
// driver.QueryerContext, so database/sql runs every query through
// PrepareContext, then closes the statement: Close returns a cached one to
// the cache instead of finalizing it. database/sql uses a connection from
// one goroutine at a time, but a transaction may hold rows of a statement
// open while it runs the same text again: a statement in use is not
// handed out twice (a second, uncached one is prepared).
type cachingConn struct {
	inner
	lru   *list.List // of *cachedStmt, most recently used first
	bySQL map[string]*list.Element
	// bad is set when the connection could not be set back to
	// synchronous=FULL: database/sql then discards it.
	bad bool
}

func newCachingConn(dc driver.Conn) (*cachingConn, error) {
	in, ok := dc.(inner)
	if !ok {
		_ = dc.Close()
		return nil, errors.New("sqlite: the driver's connection lacks an interface the store needs")
	}
	return &cachingConn{inner: in, lru: list.New(), bySQL: map[string]*list.Element{}}, nil
}

// cachedStmt is a statement of the cache; busy while database/sql holds it.
type cachedStmt struct {
	driver.Stmt
	query string
	busy  bool
}

// Close implements driver.Stmt: the statement goes back to the cache.
func (s *cachedStmt) Close() error {
	s.busy = false
	return nil
}

// ExecContext implements driver.StmtExecContext.
func (s *cachedStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	return s.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
}

// QueryContext implements driver.StmtQueryContext.
func (s *cachedStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	return s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
}

// Prepare implements driver.Conn.
func (c *cachingConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

// PrepareContext implements driver.ConnPrepareContext.
func (c *cachingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if el, ok := c.bySQL[query]; ok {
		s := el.Value.(*cachedStmt)
		if !s.busy {
			s.busy = true
			c.lru.MoveToFront(el)
			return s, nil
		}
		return c.inner.PrepareContext(ctx, query) // in use: one of its own
	}
	st, err := c.inner.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if _, ok := st.(driver.StmtExecContext); !ok {
		return st, nil
	}
	if _, ok := st.(driver.StmtQueryContext); !ok {
		return st, nil
	}
	s := &cachedStmt{Stmt: st, query: query, busy: true}
	c.bySQL[query] = c.lru.PushFront(s)
	c.evict()
	return s, nil
}

// evict finalizes the least recently used idle statements past the bound.
func (c *cachingConn) evict() {
	for el := c.lru.Back(); el != nil && c.lru.Len() > stmtCacheSize; {
		prev := el.Prev()
		if s := el.Value.(*cachedStmt); !s.busy {
			c.lru.Remove(el)
			delete(c.bySQL, s.query)
			_ = s.Stmt.Close()
		}
		el = prev
	}
}

// Close implements driver.Conn: every cached statement is finalized first.
func (c *cachingConn) Close() error {
	for el := c.lru.Front(); el != nil; el = el.Next() {
		_ = el.Value.(*cachedStmt).Stmt.Close()
	}
	c.lru.Init()
	c.bySQL = nil
	return c.inner.Close()
}

// unsyncedKey marks a context whose write transaction commits without a
// sync of its own (withoutSync).
type unsyncedKey struct{}

// withoutSync returns ctx marked so that the write transaction begun with
// it commits under synchronous=NORMAL instead of FULL: its commit appends
// to the log without waiting for an fsync. In WAL mode every synced
// commit and every checkpoint first syncs the whole log, so what is
// durable is always a prefix of the commits in order: a commit without
// its own sync is durable at the next synced one, and a power cut can
// lose it only with every commit after it. A process crash loses none.
// Only a transaction whose loss is harmless may use it (the relay's
// marks: see relayTx.write).
func withoutSync(ctx context.Context) context.Context {
	return context.WithValue(ctx, unsyncedKey{}, true)
}

// BeginTx implements driver.ConnBeginTx: a transaction begun with a
// context of withoutSync runs under synchronous=NORMAL, and FULL is set
// again when it ends; a connection that cannot be set back to FULL is
// discarded (IsValid), never reused for a commit that must be synced.
func (c *cachingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if unsynced, _ := ctx.Value(unsyncedKey{}).(bool); !unsynced {
		return c.inner.BeginTx(ctx, opts)
	}
	if err := c.exec(ctx, "PRAGMA synchronous = NORMAL"); err != nil {
		c.synced()
		return nil, err
	}
	t, err := c.inner.BeginTx(ctx, opts)
	if err != nil {
		c.synced()
		return nil, err
	}
	return &unsyncedTx{Tx: t, c: c}, nil
}

// synced sets the connection back to synchronous=FULL, or marks it bad.
func (c *cachingConn) synced() {
	if err := c.exec(context.Background(), "PRAGMA synchronous = FULL"); err != nil {
		c.bad = true
	}
}

// exec runs query, which takes no argument, on the connection.
func (c *cachingConn) exec(ctx context.Context, query string) error {
	st, err := c.PrepareContext(ctx, query)
	if err != nil {
		return err
	}
	defer st.Close()
	_, err = st.(driver.StmtExecContext).ExecContext(ctx, nil)
	return err
}

// IsValid implements driver.Validator.
func (c *cachingConn) IsValid() bool { return !c.bad && c.inner.IsValid() }

// ResetSession implements driver.SessionResetter.
func (c *cachingConn) ResetSession(ctx context.Context) error {
	if c.bad {
		return driver.ErrBadConn
	}
	return c.inner.ResetSession(ctx)
}

// unsyncedTx is a transaction under synchronous=NORMAL: FULL again once
// it ends.
type unsyncedTx struct {
	driver.Tx
	c *cachingConn
}

// Commit implements driver.Tx.
func (t *unsyncedTx) Commit() error {
	defer t.c.synced()
	return t.Tx.Commit()
}

// Rollback implements driver.Tx.
func (t *unsyncedTx) Rollback() error {
	defer t.c.synced()
	return t.Tx.Rollback()
}
