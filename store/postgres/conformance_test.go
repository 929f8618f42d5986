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
// statements), and through pgx's stdlib driver. The suites run in each, since each
// takes paths the others never do.
var modes = []struct {
	name string
	opts postgres.Options
}{
	{"prepared", postgres.Options{MaxConns: 40}},
	{"unprepared", postgres.Options{MaxConns: 40, Unprepared: true}},
	{"pgx", postgres.Options{MaxConns: 40, Driver: postgres.DriverPgx}},
}

// harness gives each test its own schema on the test server (pgtest), so tests and
// packages run in parallel against one Postgres, and opens it with the public Open
// and opts, as users do.
func harness(opts postgres.Options) conformance.Harness {
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
			return open(tb, pgtest.DSN(tb))
		},
		Reopen: func(tb testing.TB, db refset.Database) refset.Database {
			tb.Helper()
			dsn, ok := dsnOf.Load(db)
			require.True(tb, ok, "Reopen of a database this harness did not open")
			return open(tb, dsn.(string))
		},
		Types: conformance.Types{Text: "text", Int: "bigint", Bytes: "bytea", Time: "timestamptz", Bool: "boolean", Float: "double precision"},
	}
}

func TestConformance(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			conformance.Run(t, harness(m.opts))
		})
	}
}

func TestCleanupConformance(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			conformance.RunCleanup(t, harness(m.opts))
		})
	}
}

func TestPromisesConformance(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			conformance.RunPromises(t, harness(m.opts))
		})
	}
}
