// Package stmtcache keeps the statements of callers' refset.Exec commands prepared on
// a database's write pool, a bounded number of them, so that a hand-over's commands
// cost what the store's own writes cost: one round trip each on lib/pq instead of two
// (it parses a statement with arguments in a round trip of its own), and no new
// compilation on SQLite.
//
// A statement is prepared on the pool, outside any transaction, and run inside one
// with sql.Tx.StmtContext, which prepares it on the transaction's connection the
// first time it meets that connection. Preparing on the pool takes a connection of its
// own, which inside a transaction on SQLite's one writer connection would wait for
// itself, and on a busy Postgres pool for another transaction to end. So a statement
// not yet prepared runs unprepared, as it always did, and is noted; the next
// transaction the database begins prepares what was noted first (Prepare), while no
// connection is held. Only a statement that ran twice is noted: SQL made anew for
// each call (an ID written into it) would otherwise cost a prepare, and later a close,
// each time, and save nothing.
//
// The cache is a least-recently-used list keyed by SQL text: the statements of a few
// commands stay prepared forever, and a program that makes its commands' SQL on the
// fly never holds more than Size statements on any connection. An evicted statement
// is closed on every connection it was prepared on (database/sql closes it on a busy
// connection when that connection is next put back in the pool).
package stmtcache

import (
	"container/list"
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
)

// DefaultSize is how many statements a cache keeps when the store's options do not say.
const DefaultSize = 64

// Size is the size a store's option asks for: 0 means DefaultSize, a negative size
// none (no cache).
func Size(option int) int {
	switch {
	case option == 0:
		return DefaultSize
	case option < 0:
		return 0
	}
	return option
}

// ErrStale marks the error of a statement that PostgreSQL refused because it was
// prepared before a migration changed the type of a column it returns ("cached plan
// must not change result type", SQLSTATE 0A000). The store's error translation wraps
// it; refset then runs the unit of work once more, in a new transaction, where the
// statement is prepared anew (the cache forgets it at once, pgx's own cache on the
// error).
var ErrStale = errors.New("prepared statement out of date after a schema change")

// MarkStale returns err, made to match ErrStale without changing its message: the
// SQLSTATE that marks an out-of-date statement also marks statements that are wrong
// in themselves, whose message must not then blame a schema change.
func MarkStale(err error) error { return stale{err} }

type stale struct{ err error }

func (s stale) Error() string        { return s.err.Error() }
func (s stale) Unwrap() error        { return s.err }
func (s stale) Is(target error) bool { return target == ErrStale }

// Preparer is a pool that prepares statements: *sql.DB, and *sqlx.DB through it.
type Preparer interface {
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

// Cache is the prepared statements of one pool. A nil *Cache prepares nothing: Exec
// runs every statement unprepared.
type Cache struct {
	pool  Preparer
	size  int
	stale func(error) bool // whether a run failed because the statement is out of date

	noted atomic.Bool // some statement waits in wanted

	mu      sync.Mutex
	lru     list.List                // of *entry, most recently used first
	byQuery map[string]*list.Element // into lru
	seen    map[string]bool          // ran unprepared once; at most seenLimit, then cleared
	wanted  map[string]bool          // ran unprepared again since the last Prepare; at most size
	closed  bool
}

type entry struct {
	query string
	stmt  *sql.Stmt
}

// New returns a cache of at most size statements prepared on pool, or nil when size
// is not positive. stale, if not nil, tells a run that failed because the statement is
// out of date; the cache then forgets the statement.
func New(pool Preparer, size int, stale func(error) bool) *Cache {
	if size <= 0 {
		return nil
	}
	return &Cache{pool: pool, size: size, stale: stale, byQuery: map[string]*list.Element{}, seen: map[string]bool{}, wanted: map[string]bool{}}
}

// Exec runs query with args in tx, a transaction begun on the cache's pool: as the
// cached prepared statement if there is one, otherwise unprepared, noting query to be
// prepared by the next Prepare if it ran for the second time. A statement that fails
// keeps failing the way it did unprepared, and is never noted.
func (c *Cache) Exec(ctx context.Context, tx *sql.Tx, query string, args ...any) (sql.Result, error) {
	if c == nil {
		return tx.ExecContext(ctx, query, args...)
	}
	st := c.lookup(query)
	if st == nil {
		res, err := tx.ExecContext(ctx, query, args...)
		if err == nil {
			c.note(query)
		}
		return res, err
	}
	res, err := tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	if err != nil && c.stale != nil && c.stale(err) {
		c.Forget(query, st)
	}
	return res, err
}

// Stmt is query prepared on the cache's pool, prepared now if it is not cached, or nil
// if it does not prepare (the caller then runs it unprepared and reports what that
// run fails with; a failed prepare is not remembered, so a table created later is
// found). Unlike Exec, it is for a pool where preparing waits for no transaction of
// the caller's: the pool reads outside transactions go to.
func (c *Cache) Stmt(ctx context.Context, query string) *sql.Stmt {
	if c == nil {
		return nil
	}
	if st := c.lookup(query); st != nil {
		return st
	}
	st, err := c.pool.PrepareContext(ctx, query)
	if err != nil {
		return nil
	}
	return c.add(query, st)
}

// Prepare prepares on the pool the statements noted since the last call. Call it
// where no connection of the pool is held: before beginning a transaction. A
// statement that does not prepare is not cached: it runs unprepared next time and
// reports its own error there. Prepare gives up when ctx ends.
func (c *Cache) Prepare(ctx context.Context) {
	if c == nil || !c.noted.Load() {
		return
	}
	c.mu.Lock()
	queries := make([]string, 0, len(c.wanted))
	for q := range c.wanted {
		queries = append(queries, q)
	}
	clear(c.wanted)
	c.noted.Store(false)
	c.mu.Unlock()
	for _, q := range queries {
		if ctx.Err() != nil {
			return
		}
		if st, err := c.pool.PrepareContext(ctx, q); err == nil {
			c.add(q, st)
		}
	}
}

// Len is how many statements the cache holds.
func (c *Cache) Len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// Close closes every cached statement; the cache prepares nothing after.
func (c *Cache) Close() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	var stmts []*sql.Stmt
	for el := c.lru.Front(); el != nil; el = el.Next() {
		stmts = append(stmts, el.Value.(*entry).stmt)
	}
	c.lru.Init()
	clear(c.byQuery)
	clear(c.seen)
	clear(c.wanted)
	c.closed = true
	c.mu.Unlock()
	var errs []error
	for _, st := range stmts {
		errs = append(errs, st.Close())
	}
	return errors.Join(errs...)
}

// lookup is query's statement, marked as the most recently used, or nil.
func (c *Cache) lookup(query string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byQuery[query]
	if !ok {
		return nil
	}
	c.lru.MoveToFront(el)
	return el.Value.(*entry).stmt
}

// note remembers that query ran unprepared: the second time, for Prepare.
func (c *Cache) note(query string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || len(c.wanted) >= c.size {
		return
	}
	if _, cached := c.byQuery[query]; cached {
		return
	}
	if !c.seen[query] {
		if len(c.seen) >= c.seenLimit() {
			clear(c.seen) // a program making its SQL on the fly: start over
		}
		c.seen[query] = true
		return
	}
	delete(c.seen, query)
	c.wanted[query] = true
	c.noted.Store(true)
}

// seenLimit bounds how many statements that ran once the cache remembers: enough
// that the statements of a program's commands, however few the cache keeps, meet
// their second run among them.
func (c *Cache) seenLimit() int { return max(4*c.size, 256) }

// add caches st as query's statement, closing the least recently used ones beyond
// the cache's size, and returns query's statement: st, or the one another goroutine
// cached first (nil once the cache is closed).
func (c *Cache) add(query string, st *sql.Stmt) *sql.Stmt {
	c.mu.Lock()
	var evicted []*sql.Stmt
	if el, dup := c.byQuery[query]; dup || c.closed {
		evicted = append(evicted, st)
		st = nil
		if dup {
			st = el.Value.(*entry).stmt
		}
	} else {
		c.byQuery[query] = c.lru.PushFront(&entry{query: query, stmt: st})
		for c.lru.Len() > c.size {
			e := c.lru.Remove(c.lru.Back()).(*entry)
			delete(c.byQuery, e.query)
			evicted = append(evicted, e.stmt)
		}
	}
	c.mu.Unlock()
	// Closing sends a message on every connection the statement was prepared on: not
	// under the lock.
	for _, e := range evicted {
		_ = e.Close()
	}
	return st
}

// Forget drops query's statement if it is still st, closing it: a statement that
// failed, so that the next run prepares it anew.
func (c *Cache) Forget(query string, st *sql.Stmt) {
	c.mu.Lock()
	el, ok := c.byQuery[query]
	if ok && el.Value.(*entry).stmt == st {
		c.lru.Remove(el)
		delete(c.byQuery, query)
	} else {
		ok = false
	}
	c.mu.Unlock()
	if ok {
		_ = st.Close() // the error that made us forget it is the one that matters
	}
}
