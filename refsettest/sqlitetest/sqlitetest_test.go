package sqlitetest_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsettest/sqlitetest"
	_ "github.com/refsetdb/refset/store/sqlite/modernc" // the SQLite driver of these tests
)

// TestOpen checks that the database is a file in the test's temporary directory,
// ready for refset, and closed when the test ends.
func TestOpen(t *testing.T) {
	var db refset.Database
	t.Run("inner", func(t *testing.T) {
		sdb := sqlitetest.Open(t)
		db = sdb
		var file string
		require.NoError(t, sdb.Readers().GetContext(t.Context(), &file, `SELECT file FROM pragma_database_list WHERE name = 'main'`))
		require.True(t, strings.HasPrefix(file, os.TempDir()), "database file %s", file)
		var fk bool
		require.NoError(t, sdb.Readers().GetContext(t.Context(), &fk, `PRAGMA foreign_keys`))
		require.True(t, fk, "foreign keys enforced")
		_, err := sdb.Writer().ExecContext(t.Context(), `CREATE TABLE t (id TEXT PRIMARY KEY)`)
		require.NoError(t, err)
	})
	_, err := db.Begin(context.Background())
	require.ErrorIs(t, err, refset.ErrClosed, "closed when the test ended")
}
