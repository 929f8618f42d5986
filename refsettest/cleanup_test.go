package refsettest_test

import (
	"context"
	"testing"

	"github.com/refsetdb/refset/refsettest"
	"github.com/refsetdb/refset/refsettest/sqlitetest"
	"github.com/refsetdb/refset/store/postgres"
)

// The fixtures work from a t.Cleanup: a test may open a database there to check
// what its body left on disk or on the server, and each opens as in the test's body.
func TestFixturesInCleanup(t *testing.T) {
	t.Run("sqlitetest.Open", func(t *testing.T) {
		t.Cleanup(func() { exec(t, sqlitetest.Open(t), `CREATE TABLE t (id TEXT PRIMARY KEY)`) })
	})
	t.Run("Postgres", func(t *testing.T) {
		t.Cleanup(func() { exec(t, refsettest.Postgres(t, postgres.Options{}), `CREATE TABLE t (id TEXT PRIMARY KEY)`) })
	})
	t.Run("PgBouncerDSN", func(t *testing.T) {
		t.Cleanup(func() {
			db, err := postgres.Open(context.Background(), refsettest.PgBouncerDSN(t), postgres.Options{Unprepared: true})
			if err == nil {
				err = db.Close()
			}
			if err != nil {
				t.Error(err)
			}
		})
	})
	t.Run("PlanGuard", func(t *testing.T) {
		t.Cleanup(func() {
			log, db, _ := refsettest.PlanGuard(t)
			log.PlansOf(t, func() { exec(t, db, `CREATE TABLE t (id TEXT PRIMARY KEY)`) })
		})
	})
}
