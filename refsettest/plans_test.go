package refsettest_test

import (
	"database/sql"
	"strings"
	"testing"

	"github.com/refsetdb/refset/refsettest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A plan guard sees what the server ran on db, nested statements included, and
// nothing of plain; AssertPlans passes a lookup by key and reports a statement that
// reads a big table whole, naming the phase and the table, and leaves a small one be.
func TestPlanGuard(t *testing.T) {
	ctx := t.Context()
	log, db, plain := refsettest.PlanGuard(t)
	withNotes(t, plain,
		`CREATE TABLE tags (id TEXT PRIMARY KEY)`,
		`INSERT INTO tags VALUES ('a'), ('b')`,
		// A function's statements are nested: the guard sees them too.
		`CREATE FUNCTION sum_above(above BIGINT) RETURNS NUMERIC LANGUAGE sql AS 'SELECT sum(n) FROM notes WHERE n > above'`,
		`ANALYZE tags`,
	)
	pool := db.Pool().DB

	byKey := log.PlansOf(t, func() {
		var n int64
		require.NoError(t, pool.QueryRowContext(ctx, `SELECT n FROM notes WHERE id = $1`, "n-7").Scan(&n))
		require.NoError(t, pool.QueryRowContext(ctx, `SELECT count(*) FROM tags`).Scan(&n))
	})
	require.Len(t, byKey, 2, "the guard logs each statement run on db")
	assert.True(t, refsettest.AssertPlans(t, "by key", byKey, "notes"))
	assert.Contains(t, byKey[0].Nodes(), refsettest.PlanNode{Type: "Index Scan", Relation: "notes", Rows: 1})

	whole := log.PlansOf(t, func() {
		var sum float64
		require.NoError(t, pool.QueryRowContext(ctx, `SELECT sum_above(0)`).Scan(&sum))
	})
	rec, returned := run(t, func(tb testing.TB) {
		assert.False(t, refsettest.AssertPlans(tb, "whole", whole, "notes"))
	})
	require.True(t, returned)
	require.Len(t, rec.errors, 1, "one fault, reported once: %q", rec.errors)
	assert.True(t, strings.HasPrefix(rec.errors[0], "whole: sequential scan of notes: SELECT sum(n) FROM notes WHERE n > above"), rec.errors[0])

	rec, _ = run(t, func(tb testing.TB) { assert.False(t, refsettest.AssertPlans(tb, "none", nil, "notes")) })
	assert.Equal(t, []string{"none: no plans to check"}, rec.errors)

	// plain's statements are not logged: a guard that saw no plan checked nothing.
	rec, returned = run(t, func(tb testing.TB) {
		log.PlansOf(tb, func() {
			_, err := plain.ExecContext(ctx, `SELECT count(*) FROM notes`)
			require.NoError(t, err)
		})
	})
	assert.False(t, returned)
	assert.True(t, rec.fatal, "PlansOf of a workload that ran nothing on db: %q", rec.errors)
	assert.Empty(t, log.Unparsed())
}

// AssertPlans reads the names in big as PostgreSQL reads a table's name in SQL:
// unquoted ones fold to lower case, quoted ones keep theirs, a schema qualifies one,
// and a partition is read as its partitioned table. A name no plan reads that names
// no table either (a typo, a case PostgreSQL folds, another schema) is a failure,
// not a pass: it checked nothing. A big table this workload does not read passes.
func TestAssertPlansNames(t *testing.T) {
	ctx := t.Context()
	log, db, plain := refsettest.PlanGuard(t)
	withNotes(t, plain,
		`CREATE TABLE "Ledger" (id TEXT PRIMARY KEY, n BIGINT NOT NULL)`,
		`INSERT INTO "Ledger" SELECT 'l-' || i, i FROM generate_series(1, 20000) i`,
		`CREATE TABLE events (id BIGINT NOT NULL, n BIGINT NOT NULL) PARTITION BY RANGE (id)`,
		`CREATE TABLE events_low PARTITION OF events FOR VALUES FROM (0) TO (10000)`,
		`CREATE TABLE events_high PARTITION OF events FOR VALUES FROM (10000) TO (MAXVALUE)`,
		`INSERT INTO events SELECT i, i FROM generate_series(1, 20000) i`,
		`CREATE TABLE quiet (id TEXT PRIMARY KEY)`,
		`ANALYZE "Ledger"`, `ANALYZE events`,
	)
	var schema string
	require.NoError(t, plain.QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schema))
	pool := db.Pool().DB
	// Each statement reads its table whole: a fault on any table named big.
	plans := log.PlansOf(t, func() {
		for _, q := range []string{`SELECT sum(n) FROM notes WHERE n > 0`, `SELECT sum(n) FROM "Ledger" WHERE n > 0`, `SELECT sum(n) FROM events WHERE n > 0`} {
			var sum float64
			require.NoError(t, pool.QueryRowContext(ctx, q).Scan(&sum), q)
		}
	})

	for _, tc := range []struct {
		big  string
		want string // the start of the first failure; "" to pass
	}{
		{"notes", "names: sequential scan of notes:"},
		{"NOTES", "names: sequential scan of notes:"},
		{`"notes"`, "names: sequential scan of notes:"},
		{schema + ".notes", "names: sequential scan of notes:"},
		{`"` + schema + `"."notes"`, "names: sequential scan of notes:"},
		{`"Ledger"`, "names: sequential scan of Ledger:"},
		{"events", "names: sequential scan of events_"},
		{"events_low", "names: sequential scan of events_low"},
		// A big table of the program that this workload does not read.
		{"quiet", ""},
		{schema + ".quiet", ""},
		// No plan reads these, and no table has their name: a typo, a name
		// PostgreSQL folds, another schema.
		{"notse", `names: big table "notse" names no table of the database, and no plan reads it`},
		{"Ledger", `names: big table "Ledger" names no table of the database, and no plan reads it`},
		{`"Notes"`, `names: big table "\"Notes\"" names no table of the database, and no plan reads it`},
		{"public.notes", `names: big table "public.notes" names no table of the database, and no plan reads it`},
		// Not a name at all.
		{"notes;", `names: big table "notes;" is not a table's name`},
		{`"notes`, `names: big table "\"notes" is not a table's name`},
		{"a.b.notes", `names: big table "a.b.notes" is not a table's name`},
	} {
		t.Run(tc.big, func(t *testing.T) {
			var ok bool
			rec, returned := run(t, func(tb testing.TB) { ok = refsettest.AssertPlans(tb, "names", plans, tc.big) })
			require.True(t, returned)
			if tc.want == "" {
				assert.True(t, ok)
				assert.Empty(t, rec.errors)
				return
			}
			require.False(t, ok, "AssertPlans passed")
			require.NotEmpty(t, rec.errors)
			assert.True(t, strings.HasPrefix(rec.errors[0], tc.want), "first failure: %q", rec.errors[0])
		})
	}
}

// withNotes makes the guard's big table, notes (20,000 rows, analyzed), on plain,
// then runs the test's own statements there.
func withNotes(t *testing.T, plain *sql.DB, statements ...string) {
	t.Helper()
	for _, q := range append([]string{
		`CREATE TABLE notes (id TEXT PRIMARY KEY, n BIGINT NOT NULL)`,
		`INSERT INTO notes SELECT 'n-' || i, i FROM generate_series(1, 20000) i`,
		`ANALYZE notes`,
	}, statements...) {
		_, err := plain.ExecContext(t.Context(), q)
		require.NoError(t, err, q)
	}
}
