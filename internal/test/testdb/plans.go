package testdb

import (
	"database/sql"
	"testing"

	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/store/postgres"
)

// PlanGuard is what a plan guard on PostgreSQL needs (pgtest.PlanGuard): db, a
// database of store/postgres on one session whose every plan log collects, and
// plain, a pool on the same schema whose plans nobody watches, for the test's own
// statements (loads, making rows due). All close when tb ends. A plan guard loads
// tables large enough for the planner's choices to matter, which load says
// ("loads 30,000 objects"): under -short it skips tb, saying so.
func PlanGuard(tb testing.TB, load string) (log *pgtest.PlanLog, db *postgres.DB, plain *sql.DB) {
	tb.Helper()
	if testing.Short() {
		tb.Skip(load)
	}
	log, pool, plain := pgtest.PlanGuard(tb, 1)
	db, err := postgres.New(tb.Context(), pool, postgres.Options{})
	if err != nil {
		tb.Fatalf("testdb: open the explained pool: %v", err)
	}
	tb.Cleanup(func() { db.Close() })
	return log, db, plain
}
