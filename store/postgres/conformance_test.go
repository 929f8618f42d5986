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
// statements), through pgx's stdlib driver, with a hot standby for the reads that
// may lag, and through PgBouncer in transaction mode (pgtest.Pooled) with each
// driver, unprepared as a pooler needs. The suites run in each, since each takes
// paths the others never do.
var modes = []mode{
	{name: "prepared", opts: postgres.Options{MaxConns: 40}},
	{name: "unprepared", opts: postgres.Options{MaxConns: 40, Unprepared: true}},
	{name: "pgx", opts: postgres.Options{MaxConns: 40, Driver: postgres.DriverPgx}},
	{name: "standby", opts: postgres.Options{MaxConns: 40}, standby: true},
	{name: "pgbouncer", opts: postgres.Options{MaxConns: 40, Unprepared: true}, pooled: true},
	{name: "pgbouncer-pgx", opts: postgres.Options{MaxConns: 40, Unprepared: true, Driver: postgres.DriverPgx}, pooled: true, notInRun: true},
}

// mode is one way of reaching Postgres.
type mode struct {
	name    string
	opts    postgres.Options
	standby bool // open each database with a replica (pgtest.NewWithStandby)
	pooled  bool // through PgBouncer
	// notInRun keeps the mode out of conformance.Run, the longest suite, where
	// another mode takes the same paths: pgx through PgBouncer differs from lib/pq
	// through it in its driver's settings (TestPooledReadsRunTheirOwnStatements) and
	// in cancel requests (RunPromises, RunCleanup), not in what Run checks.
	notInRun bool
}

// harness gives each test its own schema on the test server (pgtest), so tests and
// packages run in parallel against one Postgres, and opens it with the public Open
// and the mode's options, as users do; with standby, with the schema on the standby
// as replica; pooled, through PgBouncer.
func harness(m mode) conformance.Harness {
	opts := m.opts
	skipCancels := ""
	if m.pooled && opts.Driver != postgres.DriverPgx {
		// pgx closes the connection instead of sending a cancel request.
		skipCancels = "PgBouncer 1.18 (the harness's) may crash on lib/pq's cancel requests (pgbouncer#801, fixed in 1.19.1)"
	}
	// dsnsOf remembers the DSNs each test database was opened with, for Reopen.
	type dsns struct{ primary, standby string }
	var dsnsOf sync.Map // *postgres.DB -> dsns
	open := func(tb testing.TB, at dsns) *postgres.DB {
		tb.Helper()
		opts := opts
		opts.ReplicaDSN = at.standby
		db, err := postgres.Open(tb.Context(), at.primary, opts)
		require.NoError(tb, err)
		dsnsOf.Store(db, at)
		tb.Cleanup(func() { dsnsOf.Delete(db); db.Close() })
		return db
	}
	return conformance.Harness{
		Cleanup: postgres.TestCleanupDialect,
		Open: func(tb testing.TB) refset.Database {
			tb.Helper()
			switch {
			case m.standby:
				primary, standby, _ := pgtest.NewWithStandby(tb)
				return open(tb, dsns{primary, standby})
			case m.pooled:
				return open(tb, dsns{primary: pgtest.Pooled(tb)})
			}
			return open(tb, dsns{primary: pgtest.DSN(tb)})
		},
		Reopen: func(tb testing.TB, db refset.Database) refset.Database {
			tb.Helper()
			at, ok := dsnsOf.Load(db)
			require.True(tb, ok, "Reopen of a database this harness did not open")
			return open(tb, at.(dsns))
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
			conformance.Run(t, harness(m))
		})
	}
}

func TestCleanupConformance(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			conformance.RunCleanup(t, harness(m))
		})
	}
}

func TestPromisesConformance(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			conformance.RunPromises(t, harness(m))
		})
	}
}
