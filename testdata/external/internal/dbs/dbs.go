// Package dbs runs a test on each database refset supports, all opened the one way a
// program opens its database, store.Open with a DSN: a SQLite file, and PostgreSQL
// through lib/pq and pgx, in a schema of the test's own on the server
// REFSET_TEST_POSTGRES names (refsettest.PostgresDSN: without the variable the
// PostgreSQL subtests skip, or fail under CI=true).
package dbs

import (
	"path/filepath"
	"testing"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsettest"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/refsetdb/refset/store/sqlite"
	_ "github.com/refsetdb/refset/store/sqlite/mattn" // go-sqlite3 (cgo)
)

// Each runs fn as a parallel subtest on each database, fresh and empty, closed when
// the subtest ends.
func Each(t *testing.T, fn func(t *testing.T, db refset.Database)) {
	t.Helper()
	for _, c := range []struct {
		name   string
		dsn    func(testing.TB) string
		driver string
	}{
		{"sqlite", func(tb testing.TB) string { return filepath.Join(tb.TempDir(), "ledger.db") }, ""},
		{"libpq", refsettest.PostgresDSN, postgres.DriverLibPQ},
		{"pgx", refsettest.PostgresDSN, postgres.DriverPgx},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db, err := store.Open(t.Context(), c.dsn(t), sqlite.Options{}, postgres.Options{Driver: c.driver})
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			// Registered after PostgresDSN's drop of the schema, so it runs first.
			t.Cleanup(func() {
				if err := db.Close(); err != nil {
					t.Errorf("close: %v", err)
				}
			})
			fn(t, db)
		})
	}
}
