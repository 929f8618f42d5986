package schema_test

import (
	"database/sql"
	"sort"
	"testing"

	"github.com/refsetdb/refset/internal/testdb"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/schema"
	"github.com/refsetdb/refset/sqlident"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// backend is a database of one store, with an object table "items" and nothing of
// refset's yet.
type backend struct {
	db     refset.Database
	raw    *sql.DB // the same database, outside refset: what a DBA's tool uses
	sql    schema.SQL
	set    schema.Set // the set on items, as its store would describe it
	tables func(t *testing.T) []string
}

var backends = []testdb.Backend{testdb.SQLite, testdb.LibPQ, testdb.Pgx}

// open opens a fresh database of b, with the table items.
func open(t *testing.T, b testdb.Backend) backend {
	t.Helper()
	db := b.Open(t, testdb.Options{})
	raw := db.Driver().Pool()
	be := backend{db: db, raw: raw, sql: db.Driver().SchemaSQL(), set: itemsSet("TEXT"),
		tables: catalog(raw, `SELECT name FROM sqlite_master WHERE type = 'table'`)}
	if b.Postgres {
		be.set = itemsSet("text")
		be.tables = catalog(raw, `SELECT tablename FROM pg_tables WHERE schemaname = current_schema()`)
	}
	return be.withItems(t)
}

func itemsSet(idType string) schema.Set {
	return schema.Set{Table: sqlident.Ident{Name: "items"}, IDColumn: "id", IDType: idType,
		Holds: sqlident.Ident{Name: "items_holds"}, Queue: sqlident.Ident{Name: "items_review"}}
}

func (b backend) withItems(t *testing.T) backend {
	t.Helper()
	_, err := b.raw.ExecContext(t.Context(), `CREATE TABLE items (id TEXT PRIMARY KEY)`)
	require.NoError(t, err)
	return b
}

// catalog lists tables as the database's own catalog has them, not through the
// code under test.
func catalog(db *sql.DB, query string) func(t *testing.T) []string {
	return func(t *testing.T) []string {
		t.Helper()
		rows, err := db.QueryContext(t.Context(), query)
		require.NoError(t, err)
		defer rows.Close()
		var names []string
		for rows.Next() {
			var n string
			require.NoError(t, rows.Scan(&n))
			names = append(names, n)
		}
		require.NoError(t, rows.Err())
		sort.Strings(names)
		return names
	}
}

// runScript runs a DBA's script in one transaction, outside refset.
func runScript(t *testing.T, db *sql.DB, script string) {
	t.Helper()
	tx, err := db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	if _, err := tx.ExecContext(t.Context(), script); err != nil {
		tx.Rollback()
		require.NoError(t, err, script)
	}
	require.NoError(t, tx.Commit())
}

var all = []string{"items", "items_holds", "items_review", "refset_schema_version", "refset_sets"}

// Apply says which component went from which version to which, and nothing when all
// was done already, also after a set's tables were dropped behind refset's back.
func TestApplyReports(t *testing.T) {
	for _, be := range backends {
		t.Run(be.Name, func(t *testing.T) {
			b := open(t, be)
			ctx := t.Context()

			done, err := schema.Apply(ctx, b.db, b.sql)
			require.NoError(t, err)
			assert.Equal(t, []schema.Applied{{Component: "core", From: 0, To: 1}}, done)

			done, err = schema.Apply(ctx, b.db, b.sql, b.set)
			require.NoError(t, err)
			assert.Equal(t, []schema.Applied{{Component: "set:items", From: 0, To: 2}}, done)
			assert.Equal(t, all, b.tables(t))

			done, err = schema.Apply(ctx, b.db, b.sql, b.set)
			require.NoError(t, err)
			assert.Empty(t, done, "all up to date")

			_, err = b.raw.ExecContext(ctx, `DROP TABLE items_review`)
			require.NoError(t, err)
			done, err = schema.Apply(ctx, b.db, b.sql, b.set)
			require.NoError(t, err)
			assert.Equal(t, []schema.Applied{{Component: "set:items", From: 0, To: 2}}, done, "a lost table's migrations run again")
			assert.Equal(t, "set:items 0 -> 2", done[0].String())
			assert.Equal(t, all, b.tables(t))
		})
	}
}

// Pending reads what is missing and changes nothing; its script, run by a DBA, brings
// the database to where Apply would have, versions recorded included.
func TestPendingScript(t *testing.T) {
	for _, be := range backends {
		t.Run(be.Name, func(t *testing.T) {
			b := open(t, be)
			ctx := t.Context()

			p, err := schema.Pending(ctx, b.db.Reader(), b.sql, b.set)
			require.NoError(t, err)
			assert.Equal(t, "core 0 -> 1, set:items 0 -> 2", p.String())
			require.Len(t, p, 2)
			assert.True(t, p[1].Register)
			assert.Equal(t, []string{"items"}, b.tables(t), "Pending created nothing")
			text, err := schema.SQLText(b.sql, b.set)
			require.NoError(t, err)
			assert.Equal(t, text, p.SQL(), "on an empty database the pending script is the whole one")
			assert.Contains(t, text, "CREATE TABLE IF NOT EXISTS \"items_holds\"")

			runScript(t, b.raw, p.SQL())
			assert.Equal(t, all, b.tables(t))
			p, err = schema.Pending(ctx, b.db.Reader(), b.sql, b.set)
			require.NoError(t, err)
			assert.Empty(t, p)
			assert.Empty(t, p.SQL())
			done, err := schema.Apply(ctx, b.db, b.sql, b.set)
			require.NoError(t, err)
			assert.Empty(t, done, "the script recorded the versions")
			r, err := b.sql.Lookup(ctx, b.db.Reader(), b.set.Table)
			require.NoError(t, err, "the script registered the set")
			assert.Equal(t, b.set.Holds, r.Holds)

			runScript(t, b.raw, text) // twice does no harm

			// Half done: the review queue lost; only it is pending.
			_, err = b.raw.ExecContext(ctx, `DELETE FROM refset_schema_version WHERE component = 'set:items'`)
			require.NoError(t, err)
			p, err = schema.Pending(ctx, b.db.Reader(), b.sql, b.set)
			require.NoError(t, err)
			assert.Equal(t, "set:items 0 -> 2", p.String())
			assert.False(t, p[0].Register, "still registered")
		})
	}
}

// Check fails with ErrSchema naming what is missing and carrying the script.
func TestCheck(t *testing.T) {
	for _, be := range backends {
		t.Run(be.Name, func(t *testing.T) {
			b := open(t, be)
			ctx := t.Context()
			err := schema.Check(ctx, b.db.Reader(), b.sql, b.set)
			require.ErrorIs(t, err, refset.ErrSchema)
			var pe *schema.PendingError
			require.ErrorAs(t, err, &pe)
			assert.Contains(t, err.Error(), "core 0 -> 1, set:items 0 -> 2")
			assert.Contains(t, err.Error(), "schema.Pending")
			assert.Equal(t, []string{"items"}, b.tables(t), "Check created nothing")
			runScript(t, b.raw, pe.Plan.SQL())
			require.NoError(t, schema.Check(ctx, b.db.Reader(), b.sql, b.set))
		})
	}
}

// Down and up again: the tables go and come back, and the records follow.
func TestMigrateDownRoundTrip(t *testing.T) {
	for _, be := range backends {
		t.Run(be.Name, func(t *testing.T) {
			b := open(t, be)
			ctx := t.Context()
			_, err := schema.Apply(ctx, b.db, b.sql, b.set)
			require.NoError(t, err)

			// Refused, changing nothing.
			for _, c := range []struct {
				component string
				target    int
				want      error
			}{
				{"core", 0, refset.ErrReferenced}, // a set is still recorded
				{"blockmanager", 0, refset.ErrInvalidConfig},
				{"set:items", 3, refset.ErrInvalidConfig}, // up, not down
				{"set:items", -1, refset.ErrInvalidConfig},
				{"set:other", 1, refset.ErrInvalidConfig}, // never recorded: at 0
				{"set:bad name", 0, refset.ErrInvalidIdentifier},
			} {
				_, err := schema.MigrateDown(ctx, b.db, b.sql, c.component, c.target)
				require.ErrorIs(t, err, c.want, "%s to %d", c.component, c.target)
			}
			assert.Equal(t, all, b.tables(t))

			step, err := schema.MigrateDown(ctx, b.db, b.sql, "set:items", 1)
			require.NoError(t, err)
			assert.Equal(t, schema.Applied{Component: "set:items", From: 2, To: 1}, step)
			assert.Equal(t, []string{"items", "items_holds", "refset_schema_version", "refset_sets"}, b.tables(t))

			step, err = schema.MigrateDown(ctx, b.db, b.sql, "set:items", 0)
			require.NoError(t, err)
			assert.Equal(t, schema.Applied{Component: "set:items", From: 1, To: 0}, step)
			_, err = b.sql.Lookup(ctx, b.db.Reader(), b.set.Table)
			require.ErrorIs(t, err, refset.ErrNotFound, "the registration went with the set")

			step, err = schema.MigrateDown(ctx, b.db, b.sql, "core", 0)
			require.NoError(t, err)
			assert.Equal(t, schema.Applied{Component: "core", From: 1, To: 0}, step)
			assert.Equal(t, []string{"items", "refset_schema_version"}, b.tables(t))

			step, err = schema.MigrateDown(ctx, b.db, b.sql, "core", 0)
			require.NoError(t, err)
			assert.Equal(t, schema.Applied{Component: "core", From: 0, To: 0}, step, "nothing to do")

			done, err := schema.Apply(ctx, b.db, b.sql, b.set)
			require.NoError(t, err)
			assert.Equal(t, []schema.Applied{{Component: "core", From: 0, To: 1}, {Component: "set:items", From: 0, To: 2}}, done)
			assert.Equal(t, all, b.tables(t))
		})
	}
}
