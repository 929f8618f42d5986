package postgres

import (
	"sync"
	"testing"

	"github.com/refsetdb/refset/internal/conformance"
	"github.com/refsetdb/refset/internal/pgtest"
	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/require"
)

// harness gives each test its own schema on the test server (pgtest), so tests and
// packages run in parallel against one Postgres.
var harness = conformance.Harness{
	Dialect: dialect{},
	Cleanup: cleanupDialect{},
	Open: func(tb testing.TB) refset.Database {
		tb.Helper()
		return openDSN(tb, pgtest.DSN(tb))
	},
	Reopen: func(tb testing.TB, db refset.Database) refset.Database {
		tb.Helper()
		dsn, _ := dsnOf.Load(db)
		return openDSN(tb, dsn.(string))
	},
	Types: conformance.Types{Text: "text", Int: "bigint", Bytes: "bytea", Time: "timestamptz", Bool: "boolean", Float: "double precision"},
}

// dsnOf remembers the DSN each test database was opened with, for Reopen.
var dsnOf sync.Map // *DB -> string

func openDSN(tb testing.TB, dsn string) *DB {
	tb.Helper()
	db, err := Open(tb.Context(), dsn, Options{MaxConns: 40})
	require.NoError(tb, err)
	dsnOf.Store(db, dsn)
	tb.Cleanup(func() { dsnOf.Delete(db); db.Close() })
	return db
}

func TestConformance(t *testing.T) {
	conformance.Run(t, harness)
}

func TestCleanupConformance(t *testing.T) {
	conformance.RunCleanup(t, harness)
}
