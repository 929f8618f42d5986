package testdb

import (
	"context"
	"database/sql"
	"net/url"
	"testing"

	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/refsetdb/refset/store/sqlite"
)

// Pools are the pools a test opened itself for a database, with
// [Options.CallersPools], set up as the store's New documents it, the way a user
// would:
//
//   - SQLite: a writer of one connection, with _foreign_keys=on, _journal_mode=WAL,
//     _busy_timeout=5000 and _txlock=immediate, and readers on the same file, with
//     _foreign_keys=on and _query_only=true (with PoolOfOne, the writer reads too);
//   - Postgres: a pool on the primary, lib/pq's through postgres.NewConnector and
//     sql.OpenDB, pgx's through sql.Open, with Standby one on the standby as
//     postgres.Options.Replica, and with Unprepared the DSN parameter that makes the
//     driver send each statement in one round trip (lib/pq's binary_parameters=yes,
//     pgx's default_query_exec_mode=exec), each sized by Options.MaxConns.
type Pools struct {
	// Writer is the pool writes go to: SQLite's writer, the Postgres primary's.
	Writer *sql.DB
	// Readers is the other pool New was given: SQLite's readers, the Postgres
	// standby's; nil when the Writer is the only one.
	Readers *sql.DB
}

// All are the pools, the Writer first.
func (p Pools) All() []*sql.DB {
	if p.Readers == nil {
		return []*sql.DB{p.Writer}
	}
	return []*sql.DB{p.Writer, p.Readers}
}

// PoolsOf returns the pools the test opened for db, which [Place.Open] opened with
// [Options.CallersPools]; it fails tb for a database on the pools its store opened.
func PoolsOf(tb testing.TB, db refset.Database) Pools {
	tb.Helper()
	pools := openedAs(tb, db).pools
	if pools.Writer == nil {
		tb.Fatalf("testdb: %T is on the pools its store opened, not the test's (Options.CallersPools)", db)
	}
	return pools
}

// onCallersPools says whether opts open a database of b on pools the test opens.
func (o Options) onCallersPools(b Backend) bool {
	return o.CallersPools || (o.PoolOfOne && !b.Postgres)
}

// callersPools opens the pools of p as [Pools] says, closed when tb ends (after the
// database, whose Close Open registers later).
func (p Place) callersPools(tb testing.TB, opts Options) Pools {
	if !p.Backend.Postgres {
		file := "file:" + (&url.URL{Path: p.At}).EscapedPath()
		pools := Pools{Writer: callersPool(tb, p.sqliteDriver(), file+"?_foreign_keys=on&_journal_mode=WAL&_busy_timeout=5000&_txlock=immediate")}
		pools.Writer.SetMaxOpenConns(1)
		if !opts.PoolOfOne {
			pools.Readers = callersPool(tb, p.sqliteDriver(), file+"?_foreign_keys=on&_query_only=true")
		}
		return pools
	}
	pools := Pools{Writer: p.postgresPool(tb, p.At, opts)}
	if p.StandbyAt != "" {
		pools.Readers = p.postgresPool(tb, p.StandbyAt, opts)
	}
	return pools
}

// newOn makes a database of p on pools with its store's New.
func (p Place) newOn(pools Pools, opts Options) (refset.Database, error) {
	ctx := context.Background()
	if !p.Backend.Postgres {
		return sqlite.New(ctx, pools.Writer, pools.Readers, sqlite.Options{Options: store.Options{Observer: opts.Observer, Logger: opts.Logger}})
	}
	po := p.PostgresOptions(opts)
	po.Replica, po.ReplicaDSN = pools.Readers, ""
	return postgres.New(ctx, pools.Writer, po)
}

// sqliteDriver is the database/sql driver name of p's SQLite backend.
func (p Place) sqliteDriver() string {
	if p.Backend.Driver == "" {
		return sqlite.DriverMattn
	}
	return p.Backend.Driver
}

// postgresPool is a pool of p's driver on dsn, as [Pools] says.
func (p Place) postgresPool(tb testing.TB, dsn string, opts Options) *sql.DB {
	tb.Helper()
	var pool *sql.DB
	if p.Backend.Driver == postgres.DriverPgx {
		if p.Backend.Unprepared {
			dsn = pgtest.WithParam(tb, dsn, "default_query_exec_mode", "exec")
		}
		pool = callersPool(tb, postgres.DriverPgx, dsn)
	} else {
		if p.Backend.Unprepared {
			dsn = pgtest.WithParam(tb, dsn, "binary_parameters", "yes")
		}
		connector, err := postgres.NewConnector(dsn)
		if err != nil {
			tb.Fatalf("testdb: %v", err)
		}
		pool = sql.OpenDB(connector)
		tb.Cleanup(func() { _ = pool.Close() })
	}
	if n := opts.maxConns(); n > 0 {
		pool.SetMaxOpenConns(n)
		pool.SetMaxIdleConns(n)
	}
	return pool
}

// callersPool is sql.Open's pool of driverName on dsn, closed when tb ends.
func callersPool(tb testing.TB, driverName, dsn string) *sql.DB {
	tb.Helper()
	pool, err := sql.Open(driverName, dsn)
	if err != nil {
		tb.Fatalf("testdb: open a pool of %s: %v", driverName, err)
	}
	tb.Cleanup(func() { _ = pool.Close() })
	return pool
}
