package postgres_test

import (
	"sync"
	"testing"

	"github.com/refsetdb/refset/internal/conformance"
	"github.com/refsetdb/refset/internal/pgtest"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/stretchr/testify/require"
)

// modes are the ways a store reaches Postgres: through lib/pq with its statements
// prepared (the default) and unprepared (for connection poolers that lose prepared
// statements), through pgx's stdlib driver, and through PgBouncer in transaction mode
// (pgtest.Pooled) with each driver, unprepared as a pooler needs. The suites run in
// each, since each takes paths the others never do.
var modes = []struct {
	name   string
	opts   postgres.Options
	pooled bool // through PgBouncer
	// notInRun keeps the mode out of conformance.Run, the longest suite, where
	// another mode takes the same paths: pgx through PgBouncer differs from lib/pq
	// through it in its driver's settings (TestPooledReadsRunTheirOwnStatements) and
	// in cancel requests (RunPromises, RunCleanup), not in what Run checks.
	notInRun bool
}{
	{name: "prepared", opts: postgres.Options{MaxConns: 40}},
	{name: "unprepared", opts: postgres.Options{MaxConns: 40, Unprepared: true}},
	{name: "pgx", opts: postgres.Options{MaxConns: 40, Driver: postgres.DriverPgx}},
	{name: "pgbouncer", opts: postgres.Options{MaxConns: 40, Unprepared: true}, pooled: true},
	{name: "pgbouncer-pgx", opts: postgres.Options{MaxConns: 40, Unprepared: true, Driver: postgres.DriverPgx}, pooled: true, notInRun: true},
}

// harness gives each test its own schema on the test server (pgtest), so tests and
// packages run in parallel against one Postgres, and opens it with the public Open
// and opts, as users do; pooled, through PgBouncer.
func harness(opts postgres.Options, pooled bool) conformance.Harness {
	newDSN, skipCancels := pgtest.DSN, ""
	if pooled {
		newDSN = pgtest.Pooled
		if opts.Driver != postgres.DriverPgx {
			// pgx closes the connection instead of sending a cancel request.
			skipCancels = "PgBouncer 1.18 (the harness's) may crash on lib/pq's cancel requests (pgbouncer#801, fixed in 1.19.1)"
		}
	}
	// dsnOf remembers the DSN each test database was opened with, for Reopen.
	var dsnOf sync.Map // *postgres.DB -> string
	open := func(tb testing.TB, dsn string) *postgres.DB {
		tb.Helper()
		db, err := postgres.Open(tb.Context(), dsn, opts)
		require.NoError(tb, err)
		dsnOf.Store(db, dsn)
		tb.Cleanup(func() { dsnOf.Delete(db); db.Close() })
		return db
	}
	return conformance.Harness{
		Dialect: postgres.TestDialect,
		Cleanup: postgres.TestCleanupDialect,
		Open: func(tb testing.TB) refset.Database {
			tb.Helper()
			return open(tb, newDSN(tb))
		},
		Reopen: func(tb testing.TB, db refset.Database) refset.Database {
			tb.Helper()
			dsn, ok := dsnOf.Load(db)
			require.True(tb, ok, "Reopen of a database this harness did not open")
			return open(tb, dsn.(string))
		},
		Types:       conformance.Types{Text: "text", Int: "bigint", Bytes: "bytea", Time: "timestamptz", Bool: "boolean", Float: "double precision"},
		SkipCancels: skipCancels,
	}
}

func TestConformance(t *testing.T) {
	for _, m := range modes {
		if m.notInRun {
			continue
		}
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			conformance.Run(t, harness(m.opts, m.pooled))
		})
	}
}

func TestCleanupConformance(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			conformance.RunCleanup(t, harness(m.opts, m.pooled))
		})
	}
}

func TestPromisesConformance(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			conformance.RunPromises(t, harness(m.opts, m.pooled))
		})
	}
}
