package stmtcache

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/lib/pq"
	_ "github.com/mattn/go-sqlite3"
	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// database is a real database the cache runs on, one connection, and how to count
// the statements prepared on that connection (nil where the database cannot tell).
type database struct {
	name     string
	open     func(tb testing.TB) *sql.DB
	prepared func(tb testing.TB, pool *sql.DB, like string) int
	dollar   bool
}

var databases = []database{
	{name: "sqlite", open: openSQLite},
	{name: "postgres", open: openPostgres, prepared: preparedOnPostgres, dollar: true},
}

func openSQLite(tb testing.TB) *sql.DB {
	tb.Helper()
	pool, err := sql.Open("sqlite3", "file:"+filepath.Join(tb.TempDir(), "cache.db")+"?_foreign_keys=on")
	require.NoError(tb, err)
	pool.SetMaxOpenConns(1)
	tb.Cleanup(func() { pool.Close() })
	return pool
}

// openPostgres opens one lib/pq connection: what it has prepared is what
// pg_prepared_statements shows it.
func openPostgres(tb testing.TB) *sql.DB {
	tb.Helper()
	pool, err := sql.Open("postgres", pgtest.DSN(tb))
	require.NoError(tb, err)
	pool.SetMaxOpenConns(1)
	tb.Cleanup(func() { pool.Close() })
	return pool
}

func preparedOnPostgres(tb testing.TB, pool *sql.DB, like string) int {
	tb.Helper()
	var n int
	require.NoError(tb, pool.QueryRowContext(context.Background(),
		`SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE $1`, like).Scan(&n))
	return n
}

// forEachDatabase runs fn on a fresh database of each kind with a table t(id).
func forEachDatabase(t *testing.T, fn func(t *testing.T, d database, pool *sql.DB)) {
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			pool := d.open(t)
			_, err := pool.ExecContext(t.Context(), `CREATE TABLE t (id text PRIMARY KEY)`)
			require.NoError(t, err)
			fn(t, d, pool)
		})
	}
}

// insert is an INSERT into t whose text is told apart by n, as a program making its
// statements on the fly would.
func (d database) insert(n int) string {
	arg := "?"
	if d.dollar {
		arg = "$1"
	}
	return fmt.Sprintf(`INSERT INTO t (id) VALUES (%s) /* statement %d */`, arg, n)
}

// execInTx runs query in a transaction of its own on pool, through c, and then
// prepares what it noted, as a store's next Begin does.
func execInTx(t *testing.T, c *Cache, pool *sql.DB, query string, args ...any) error {
	t.Helper()
	ctx := t.Context()
	c.Prepare(ctx)
	tx, err := pool.BeginTx(ctx, nil)
	require.NoError(t, err)
	if _, err := c.Exec(ctx, tx, query, args...); err != nil {
		require.NoError(t, tx.Rollback())
		return err
	}
	require.NoError(t, tx.Commit())
	c.Prepare(ctx)
	return nil
}

// A statement runs unprepared the first two times, is prepared after, and from then
// on runs as the cached statement.
func TestPreparedOnceItRanTwice(t *testing.T) {
	forEachDatabase(t, func(t *testing.T, d database, pool *sql.DB) {
		c := New(pool, 4, nil)
		q := d.insert(1)
		require.NoError(t, execInTx(t, c, pool, q, "a"))
		require.Nil(t, c.lookup(q), "not prepared after one run")
		require.NoError(t, execInTx(t, c, pool, q, "b"))
		st := c.lookup(q)
		require.NotNil(t, st, "prepared after its second run")
		require.NoError(t, execInTx(t, c, pool, q, "c"))
		assert.Same(t, st, c.lookup(q), "the cached statement ran, and stays")
		assert.Equal(t, 1, c.Len())
		if d.prepared != nil {
			assert.Equal(t, 1, d.prepared(t, pool, "INSERT INTO t%"), "prepared once on the connection")
		}
		var n int
		require.NoError(t, pool.QueryRowContext(t.Context(), `SELECT count(*) FROM t`).Scan(&n))
		assert.Equal(t, 3, n)
	})
}

// SQL made anew for every call is never prepared: preparing a statement that runs
// once costs a round trip, and closing it another, for nothing.
func TestOneOffStatementsAreNotPrepared(t *testing.T) {
	forEachDatabase(t, func(t *testing.T, d database, pool *sql.DB) {
		c := New(pool, 4, nil)
		for n := range c.seenLimit() + 10 {
			require.NoError(t, execInTx(t, c, pool, d.insert(n), fmt.Sprint(n)))
		}
		assert.Zero(t, c.Len())
		assert.False(t, c.noted.Load())
		assert.LessOrEqual(t, len(c.seen), c.seenLimit(), "what was seen once is bounded too")
		if d.prepared != nil {
			assert.Zero(t, d.prepared(t, pool, "INSERT INTO t%"))
		}
	})
}

// However many statements run, the cache holds at most its size, the least recently
// used go first, and an evicted statement is closed on the connection: the server
// never holds more than size of them.
func TestBoundedLeastRecentlyUsed(t *testing.T) {
	forEachDatabase(t, func(t *testing.T, d database, pool *sql.DB) {
		const size = 3
		c := New(pool, size, nil)
		for n := range 10 {
			require.NoError(t, execInTx(t, c, pool, d.insert(n), fmt.Sprint("a", n)))
			require.NoError(t, execInTx(t, c, pool, d.insert(n), fmt.Sprint("b", n)))
			// Statement 0 is used at every step: it is never the least recently used.
			require.NoError(t, execInTx(t, c, pool, d.insert(0), fmt.Sprint("z", n)))
			assert.LessOrEqual(t, c.Len(), size)
			if d.prepared != nil {
				assert.LessOrEqual(t, d.prepared(t, pool, "INSERT INTO t%"), size, "statements on the connection after %d", n)
			}
		}
		assert.Equal(t, size, c.Len())
		assert.NotNil(t, c.lookup(d.insert(0)), "the statement used all along stays")
		assert.NotNil(t, c.lookup(d.insert(9)))
		assert.Nil(t, c.lookup(d.insert(1)), "an early one was evicted")
		if d.prepared != nil {
			assert.Equal(t, size, d.prepared(t, pool, "INSERT INTO t%"))
		}

		require.NoError(t, c.Close())
		assert.Zero(t, c.Len())
		if d.prepared != nil {
			assert.Zero(t, d.prepared(t, pool, "INSERT INTO t%"), "Close closes every statement")
		}
		for i := range 3 {
			require.NoError(t, execInTx(t, c, pool, d.insert(20), fmt.Sprint("after close ", i)), "a closed cache runs statements unprepared")
		}
		assert.Zero(t, c.Len())
	})
}

// A statement that fails (a syntax error) fails as it does unprepared, every time,
// and nothing of it is cached or prepared.
func TestFailingStatementIsNotCached(t *testing.T) {
	forEachDatabase(t, func(t *testing.T, d database, pool *sql.DB) {
		c := New(pool, 4, nil)
		bad := `INSERT INTO t (id) VALUS ('x')`
		want := execInTx(t, New(pool, 4, nil), pool, bad)
		require.Error(t, want)
		for range 3 {
			err := execInTx(t, c, pool, bad)
			require.Error(t, err)
			assert.Equal(t, want.Error(), err.Error(), "the same error as unprepared")
		}
		assert.Zero(t, c.Len())
		assert.False(t, c.noted.Load(), "nothing waits to be prepared")
		if d.prepared != nil {
			assert.Zero(t, d.prepared(t, pool, "INSERT INTO t (id) VALUS%"))
		}
	})
}

// A statement whose run fails as out of date is forgotten and closed: the next run is
// unprepared, and prepares it anew.
func TestStaleStatementIsForgotten(t *testing.T) {
	forEachDatabase(t, func(t *testing.T, d database, pool *sql.DB) {
		var staleNow bool
		c := New(pool, 4, func(error) bool { return staleNow })
		q := d.insert(1)
		require.NoError(t, execInTx(t, c, pool, q, "a"))
		require.NoError(t, execInTx(t, c, pool, q, "b"))
		old := c.lookup(q)
		require.NotNil(t, old)

		staleNow = true
		require.Error(t, execInTx(t, c, pool, q, "a"), "a duplicate: the run fails")
		assert.Nil(t, c.lookup(q), "forgotten")
		staleNow = false
		require.NoError(t, execInTx(t, c, pool, q, "c"))
		require.NoError(t, execInTx(t, c, pool, q, "d"))
		assert.NotNil(t, c.lookup(q), "prepared anew")
		assert.NotSame(t, old, c.lookup(q))
	})
}

// On Postgres, a statement prepared before a migration changed the type of a column
// it returns fails with 0A000 until prepared again: the stale test sees it.
func TestPostgresStalePlan(t *testing.T) {
	pool := openPostgres(t)
	ctx := t.Context()
	_, err := pool.ExecContext(ctx, `CREATE TABLE t (id text PRIMARY KEY)`)
	require.NoError(t, err)
	isStale := func(err error) bool {
		var pe *pq.Error
		return errors.As(err, &pe) && pe.Code == "0A000"
	}
	c := New(pool, 4, isStale)
	q := `INSERT INTO t (id) VALUES ($1) RETURNING id`
	require.NoError(t, execInTx(t, c, pool, q, "a"))
	require.NoError(t, execInTx(t, c, pool, q, "b"))
	require.NotNil(t, c.lookup(q))
	_, err = pool.ExecContext(ctx, `ALTER TABLE t ALTER COLUMN id TYPE varchar(200)`)
	require.NoError(t, err)
	err = execInTx(t, c, pool, q, "c")
	require.True(t, isStale(err), "the prepared statement is refused: %v", err)
	assert.Nil(t, c.lookup(q))
	for _, id := range []string{"c", "d", "e"} {
		require.NoError(t, execInTx(t, c, pool, q, id), "runs unprepared, then prepared anew")
	}
	assert.NotNil(t, c.lookup(q))
}

// Goroutines running, preparing and evicting at once on a pool of several
// connections: every statement runs exactly once, and the cache stays bounded.
func TestConcurrentUse(t *testing.T) {
	forEachDatabase(t, func(t *testing.T, d database, pool *sql.DB) {
		if d.name == "postgres" {
			pool.SetMaxOpenConns(4)
		}
		const size, workers, runs = 3, 4, 25
		c := New(pool, size, nil)
		ctx := t.Context()
		var wg sync.WaitGroup
		errs := make(chan error, workers*runs)
		for w := range workers {
			wg.Go(func() {
				for i := range runs {
					c.Prepare(ctx)
					tx, err := pool.BeginTx(ctx, nil)
					if err != nil {
						errs <- err
						return
					}
					if _, err := c.Exec(ctx, tx, d.insert(i%5), fmt.Sprintf("%d-%d", w, i)); err != nil {
						errs <- err
						_ = tx.Rollback()
						continue
					}
					if err := tx.Commit(); err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		assert.LessOrEqual(t, c.Len(), size)
		var n int
		require.NoError(t, pool.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&n))
		assert.Equal(t, workers*runs, n)
	})
}

func TestSize(t *testing.T) {
	for _, tc := range []struct{ option, want int }{{0, DefaultSize}, {-1, 0}, {7, 7}} {
		assert.Equal(t, tc.want, Size(tc.option), "Size(%d)", tc.option)
	}
	assert.Nil(t, New(nil, 0, nil), "no cache of size 0")
}

// A nil cache runs every statement unprepared.
func TestNilCache(t *testing.T) {
	pool := openSQLite(t)
	_, err := pool.ExecContext(t.Context(), `CREATE TABLE t (id text PRIMARY KEY)`)
	require.NoError(t, err)
	var c *Cache
	require.NoError(t, execInTx(t, c, pool, `INSERT INTO t (id) VALUES (?)`, "a"))
	assert.Zero(t, c.Len())
	require.NoError(t, c.Close())
}

// MarkStale keeps the message and what the error matched, and adds ErrStale.
func TestMarkStale(t *testing.T) {
	base := fmt.Errorf("wrapped: %w", sql.ErrNoRows)
	err := MarkStale(base)
	assert.Equal(t, base.Error(), err.Error())
	assert.ErrorIs(t, err, ErrStale)
	assert.ErrorIs(t, err, sql.ErrNoRows)
	assert.NotErrorIs(t, base, ErrStale)
}

// Stmt prepares at once, on a pool no transaction holds, and hands every goroutine
// the one cached statement; one that does not prepare is not cached, and Forget
// drops a statement that failed, so the next Stmt prepares it anew.
func TestStmtPreparesNow(t *testing.T) {
	forEachDatabase(t, func(t *testing.T, d database, pool *sql.DB) {
		c := New(pool, 4, nil)
		ctx := t.Context()
		q := `SELECT count(*) FROM t`
		got := make([]*sql.Stmt, 4)
		var wg sync.WaitGroup
		for i := range got {
			wg.Go(func() { got[i] = c.Stmt(ctx, q) })
		}
		wg.Wait()
		for _, st := range got {
			require.Same(t, got[0], st, "one statement for all")
		}
		var n int
		require.NoError(t, got[0].QueryRowContext(ctx).Scan(&n))
		assert.Equal(t, 1, c.Len())

		assert.Nil(t, c.Stmt(ctx, `SELECT nope FROM missing`))
		assert.Equal(t, 1, c.Len(), "a failed prepare is not remembered")

		c.Forget(q, got[0])
		assert.Zero(t, c.Len())
		again := c.Stmt(ctx, q)
		require.NotNil(t, again)
		assert.NotSame(t, got[0], again, "prepared anew")
		assert.Nil(t, (*Cache)(nil).Stmt(ctx, q), "a nil cache prepares nothing")
	})
}
