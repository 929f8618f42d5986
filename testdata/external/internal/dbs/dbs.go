// Package dbs runs a test on each database refset supports, opened with refset's
// exported test helpers: a SQLite file, and PostgreSQL through lib/pq and pgx (on
// the server REFSET_TEST_POSTGRES names; without it the PostgreSQL subtests skip,
// or fail under CI=true).
package dbs

import (
	"testing"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsettest"
	"github.com/refsetdb/refset/refsettest/sqlitetest"
	"github.com/refsetdb/refset/store/postgres"
)

// Each runs fn as a parallel subtest on each database, fresh and empty.
func Each(t *testing.T, fn func(t *testing.T, db refset.Database)) {
	t.Helper()
	for _, c := range []struct {
		name string
		open func(testing.TB) refset.Database
	}{
		{"sqlite", func(tb testing.TB) refset.Database { return sqlitetest.Open(tb) }},
		{"libpq", func(tb testing.TB) refset.Database { return refsettest.Postgres(tb, postgres.Options{}) }},
		{"pgx", func(tb testing.TB) refset.Database {
			return refsettest.Postgres(tb, postgres.Options{Driver: postgres.DriverPgx})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fn(t, c.open(t))
		})
	}
}
