package refsettest_test

import (
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
	for _, q := range []string{
		`CREATE TABLE notes (id TEXT PRIMARY KEY, n BIGINT NOT NULL)`,
		`INSERT INTO notes SELECT 'n-' || i, i FROM generate_series(1, 20000) i`,
		`CREATE TABLE tags (id TEXT PRIMARY KEY)`,
		`INSERT INTO tags VALUES ('a'), ('b')`,
		// A function's statements are nested: the guard sees them too.
		`CREATE FUNCTION sum_above(above BIGINT) RETURNS NUMERIC LANGUAGE sql AS 'SELECT sum(n) FROM notes WHERE n > above'`,
		`ANALYZE notes`, `ANALYZE tags`,
	} {
		_, err := plain.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
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
