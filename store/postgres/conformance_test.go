package postgres_test

import (
	"testing"

	"github.com/refsetdb/refset/internal/conformance"
	"github.com/refsetdb/refset/internal/testdb"
	"github.com/refsetdb/refset/store/postgres"
)

// modes are the ways a store reaches Postgres: through lib/pq with its statements
// prepared (the default) and unprepared (for connection poolers that lose prepared
// statements), through pgx's stdlib driver, with a hot standby for the reads that
// may lag, and through PgBouncer in transaction mode with each driver, unprepared as
// a pooler needs. The suites run in each, since each takes paths the others never do.
var modes = []mode{
	{Backend: named("prepared", testdb.LibPQ)},
	{Backend: testdb.Backend{Name: "unprepared", Postgres: true, Driver: postgres.DriverLibPQ, Unprepared: true}},
	{Backend: testdb.Pgx},
	{Backend: named("standby", testdb.Standby)},
	{Backend: testdb.Backend{Name: "pgbouncer", Postgres: true, Driver: postgres.DriverLibPQ, Unprepared: true, Pooled: true}},
	{Backend: named("pgbouncer-pgx", testdb.PgBouncer), notInRun: true},
}

func named(name string, b testdb.Backend) testdb.Backend {
	b.Name = name
	return b
}

// mode is one way of reaching Postgres.
type mode struct {
	testdb.Backend
	// notInRun keeps the mode out of conformance.Run, the longest suite, where
	// another mode takes the same paths: pgx through PgBouncer differs from lib/pq
	// through it in its driver's settings (TestPooledReadsRunTheirOwnStatements) and
	// in cancel requests (RunPromises, RunCleanup), not in what Run checks.
	notInRun bool
}

// harness gives each test its own schema on the test server (internal/testdb), so
// tests and packages run in parallel against one Postgres, and opens it with the
// public Open and the mode's options, as users do.
func harness(m mode) conformance.Harness {
	skipCancels := ""
	if m.Pooled && m.Driver != postgres.DriverPgx {
		// pgx closes the connection instead of sending a cancel request.
		skipCancels = "PgBouncer 1.18 (the harness's) may crash on lib/pq's cancel requests (pgbouncer#801, fixed in 1.19.1)"
	}
	return conformance.Harness{
		Open:        conformance.OpenOn(m.Backend, testdb.Options{MaxConns: 40}),
		Reopen:      conformance.ReopenOn(testdb.Options{MaxConns: 40}),
		Types:       conformance.Types{Text: "text", Int: "bigint", Bytes: "bytea", Time: "timestamptz", Bool: "boolean", Float: "double precision"},
		SkipCancels: skipCancels,
	}
}

func TestConformance(t *testing.T) {
	for _, m := range modes {
		if m.notInRun {
			continue
		}
		t.Run(m.Name, func(t *testing.T) {
			t.Parallel()
			conformance.Run(t, harness(m))
		})
	}
}

func TestCleanupConformance(t *testing.T) {
	for _, m := range modes {
		t.Run(m.Name, func(t *testing.T) {
			t.Parallel()
			conformance.RunCleanup(t, harness(m))
		})
	}
}

func TestPromisesConformance(t *testing.T) {
	for _, m := range modes {
		t.Run(m.Name, func(t *testing.T) {
			t.Parallel()
			conformance.RunPromises(t, harness(m))
		})
	}
}
