package sqlite

import (
	"path/filepath"
	"testing"

	"github.com/refsetdb/refset/internal/conformance"
	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/require"
)

// harness opens each test's database as a file in its own temporary directory.
var harness = conformance.Harness{
	Dialect: dialect{},
	Cleanup: cleanupDialect{},
	Open: func(tb testing.TB) refset.Database {
		tb.Helper()
		return openFile(tb, filepath.Join(tb.TempDir(), "refset.db"))
	},
	Reopen: func(tb testing.TB, db refset.Database) refset.Database {
		tb.Helper()
		var path string
		require.NoError(tb, db.(*DB).Writer.QueryRowContext(tb.Context(), `SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&path))
		return openFile(tb, path)
	},
	Types: conformance.Types{Text: "TEXT", Int: "INTEGER", Bytes: "BLOB", Time: "TIMESTAMP", Bool: "BOOLEAN", Float: "REAL"},
}

func openFile(tb testing.TB, path string) *DB {
	tb.Helper()
	db, err := Open(tb.Context(), path, Options{})
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
