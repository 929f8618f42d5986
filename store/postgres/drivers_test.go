package postgres

import (
	"database/sql"
	"testing"

	"github.com/refsetdb/refset/internal/pgtest"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// drivers are the database/sql drivers refset supports on Postgres; the suites and
// the failure tests run on each.
var drivers = []string{DriverLibPQ, DriverPgx}

// forEachDriver runs fn as a subtest per driver.
func forEachDriver(t *testing.T, fn func(t *testing.T, driver string)) {
	for _, d := range drivers {
		t.Run(d, func(t *testing.T) { fn(t, d) })
	}
}

// openWith opens dsn through Open with opts, closed when tb ends.
func openWith(tb testing.TB, dsn string, opts Options) *DB {
	tb.Helper()
	if opts.MaxConns == 0 {
		opts.MaxConns = 40
	}
	db, err := Open(tb.Context(), dsn, opts)
	require.NoError(tb, err)
	tb.Cleanup(func() { db.Close() })
	return db
}

// TestNewFromCallersPool: a pool the caller opened, with either driver, serves a set;
// refset leaves it open on Close, and refuses what it cannot use.
func TestNewFromCallersPool(t *testing.T) {
	forEachDriver(t, func(t *testing.T, driver string) {
		ctx := t.Context()
		pool, err := sql.Open(driver, pgtest.DSN(t))
		require.NoError(t, err)
		t.Cleanup(func() { pool.Close() })
		_, err = pool.ExecContext(ctx, `CREATE TABLE blocks (id text PRIMARY KEY, height bigint NOT NULL)`)
		require.NoError(t, err)

		db, err := New(ctx, pool, Options{})
		require.NoError(t, err)
		setStore, err := store.NewStore[block, string](ctx, db, store.Config{Table: "blocks"})
		require.NoError(t, err)
		set := refset.New(setStore)
		tok, err := set.Add(ctx, block{Hash: "a", Height: 1}, set.Hold("me", 0))
		require.NoError(t, err)
		lease, err := set.Get(ctx, tok)
		require.NoError(t, err)
		assert.Equal(t, int64(1), lease.Value().Height)

		require.NoError(t, db.Close())
		_, err = set.Add(ctx, block{Hash: "b", Height: 2})
		require.ErrorIs(t, err, refset.ErrClosed)
		require.NoError(t, pool.PingContext(ctx), "the caller's pool stays open")
	})

	_, err := New(t.Context(), nil, Options{})
	require.ErrorIs(t, err, refset.ErrInvalidConfig)
	_, err = Open(t.Context(), "host=127.0.0.1", Options{Driver: "mysql"})
	require.ErrorIs(t, err, refset.ErrInvalidConfig)
}
