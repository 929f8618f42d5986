package sqlite_test

import (
	"path/filepath"
	"sort"
	"testing"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/schema"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/sqlite"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type thing struct {
	Key string `db:"id"`
}

func (t thing) ID() string { return t.Key }

// With ExternalMigrations a store runs no DDL: on a database a DBA has not migrated
// it fails with ErrSchema, naming what to run, and creates nothing; once the DBA ran
// the script, it works.
func TestExternalMigrations(t *testing.T) {
	ctx := t.Context()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "x.db"), sqlite.Options{Options: store.Options{ExternalMigrations: true}})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = db.Writer().ExecContext(ctx, `CREATE TABLE things (id TEXT PRIMARY KEY)`)
	require.NoError(t, err)
	tables := func() []string {
		t.Helper()
		var names []string
		require.NoError(t, db.Writer().SelectContext(ctx, &names, `SELECT name FROM sqlite_master WHERE type IN ('table', 'index', 'trigger') AND name NOT LIKE 'sqlite_%'`))
		sort.Strings(names)
		return names
	}

	_, err = store.NewStore[thing, string](ctx, db, store.Config{Table: "things"})
	require.ErrorIs(t, err, refset.ErrSchema)
	var pe *schema.PendingError
	require.ErrorAs(t, err, &pe)
	assert.Contains(t, err.Error(), "core 0 -> 2, set:things 0 -> 3")
	assert.Equal(t, []string{"things"}, tables(), "nothing created")

	m, err := schema.New(db, schema.Config{Sets: []schema.Set{{Table: "things"}}})
	require.NoError(t, err)
	plan, err := m.Migrate(ctx, schema.DirectionUp, &schema.MigrateOpts{DryRun: true})
	require.NoError(t, err)
	script := plan.SQL()
	assert.Equal(t, script, pe.Plan.SQL(), "the error carries the same script")
	_, err = db.Writer().ExecContext(ctx, script) // the DBA's part
	require.NoError(t, err)

	setStore, err := store.NewStore[thing, string](ctx, db, store.Config{Table: "things"})
	require.NoError(t, err)
	rs := refset.New(setStore)
	_, err = rs.Add(ctx, thing{Key: "a"}, rs.Hold("me", 0))
	require.NoError(t, err, "the set works on the DBA's tables")
}
