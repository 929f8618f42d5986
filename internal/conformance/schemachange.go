package conformance

import (
	"testing"

	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A store reads through statements it prepared. A migration that changes what a
// mapped column is (renamed away, and a column of another type added under its name)
// makes Postgres refuse such a statement ("cached plan must not change result type")
// on every connection that prepared it, until it is prepared again; SQLite prepares
// it again by itself. Either way reads go on without the program being restarted.
func testReadsSurviveSchemaChange(t *testing.T, h Harness) {
	e := newEnv(t, h)
	ctx := t.Context()
	e.mustExec(t, `CREATE TABLE named (num {Int} PRIMARY KEY, name {Text} NOT NULL)`)
	store := openStore[intObj, int64](t, e, "named")
	_, err := refset.New(store).Add(ctx, intObj{Num: 1, Name: "one"})
	require.NoError(t, err)

	steps := []struct {
		migration []string
		want      string
	}{
		{nil, "one"},
		{[]string{`ALTER TABLE named RENAME COLUMN name TO old_name`,
			`ALTER TABLE named ADD COLUMN name {Bytes} NOT NULL DEFAULT ''`}, ""},
	}
	for _, step := range steps {
		for _, m := range step.migration {
			e.mustExec(t, m)
		}
		for range 3 { // enough to reuse a pooled connection's statement
			got, err := store.Get(ctx, e.db.Reader(), 1)
			require.NoError(t, err, "after %q", step.migration)
			assert.Equal(t, intObj{Num: 1, Name: step.want}, got)
			found, err := store.Has(ctx, e.db.Reader(), 1)
			require.NoError(t, err)
			assert.True(t, found)
		}
	}
}
