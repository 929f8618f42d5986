package postgres

import (
	"database/sql"
	"testing"

	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/refset"
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

// TestNewFromCallersPool: New refuses what it cannot use, and takes the pools Open
// makes. (That a caller's pool, of either driver, serves a set and stays open on
// Close is the conformance suite's CallersPools, on every harness.)
func TestNewFromCallersPool(t *testing.T) {
	_, err := New(t.Context(), nil, Options{})
	require.ErrorIs(t, err, refset.ErrInvalidConfig)
	_, err = Open(t.Context(), "host=127.0.0.1", Options{Driver: "mysql"})
	require.ErrorIs(t, err, refset.ErrInvalidConfig)

	// A lib/pq pool that sql.Open made would run a statement again after its
	// connection was lost once the statement was sent: refused, naming the fix.
	plain, err := sql.Open(DriverLibPQ, pgtest.DSN(t))
	require.NoError(t, err)
	t.Cleanup(func() { plain.Close() })
	db, err := New(t.Context(), plain, Options{})
	require.ErrorIs(t, err, refset.ErrInvalidConfig)
	assert.Nil(t, db)
	assert.Contains(t, err.Error(), "sql.OpenDB(postgres.NewConnector(dsn))")
	_, err = NewConnector("postgres://a:5432,b:x/db")
	require.ErrorIs(t, err, refset.ErrInvalidConfig, "a DSN lib/pq cannot read")

	// The pools Open makes have the guards New asks of a caller's, on the primary
	// and on the replica alike: New takes them.
	for _, unprepared := range []bool{false, true} {
		opened, err := Open(t.Context(), pgtest.DSN(t), Options{Driver: DriverLibPQ, Unprepared: unprepared})
		require.NoError(t, err)
		t.Cleanup(func() { opened.Close() })
		again, err := New(t.Context(), opened.Pool().DB, Options{Unprepared: unprepared})
		require.NoError(t, err, "New refuses the pool Open made (unprepared: %v): it lacks the guards", unprepared)
		require.NoError(t, again.Close())
	}
}

// callersPool is a pool of the caller's on dsn through driver, as New takes it
// (lib/pq's through NewConnector), closed when tb ends.
func callersPool(tb testing.TB, driver, dsn string) *sql.DB {
	tb.Helper()
	var pool *sql.DB
	if driver == DriverLibPQ {
		connector, err := NewConnector(dsn)
		require.NoError(tb, err)
		pool = sql.OpenDB(connector)
	} else {
		var err error
		pool, err = sql.Open(driver, dsn)
		require.NoError(tb, err)
	}
	tb.Cleanup(func() { pool.Close() })
	return pool
}
