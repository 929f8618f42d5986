package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/refsetdb/refset/internal/conformance"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store/sqlite"
	"github.com/stretchr/testify/require"
)

// harness opens each test's database as a file in its own temporary directory, with
// the public Open, as users do.
var harness = conformance.Harness{
	Cleanup: sqlite.TestCleanupDialect,
	Open: func(tb testing.TB) refset.Database {
		tb.Helper()
		return open(tb, filepath.Join(tb.TempDir(), "refset.db"))
	},
	Reopen: func(tb testing.TB, db refset.Database) refset.Database {
		tb.Helper()
		var path string
		require.NoError(tb, db.(*sqlite.DB).Writer.QueryRowContext(tb.Context(), `SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&path))
		return open(tb, path)
	},
	Types: conformance.Types{Text: "TEXT", Int: "INTEGER", Bytes: "BLOB", Time: "TIMESTAMP", Bool: "BOOLEAN", Float: "REAL"},
}

func open(tb testing.TB, path string) *sqlite.DB {
	tb.Helper()
	db, err := sqlite.Open(tb.Context(), path, sqlite.Options{})
	require.NoError(tb, err)
	tb.Cleanup(func() { db.Close() })
	return db
}

func TestConformance(t *testing.T) {
	conformance.Run(t, harness)
}

func TestCleanupConformance(t *testing.T) {
	conformance.RunCleanup(t, harness)
}

func TestPromisesConformance(t *testing.T) {
	conformance.RunPromises(t, harness)
}
