package schema_test

import (
	"database/sql"
	"errors"
	"sort"
	"testing"
	"testing/fstest"

	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
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
	sql    refsetdriver.SchemaSQL
	tables func(t *testing.T) []string
}

var backends = []testdb.Backend{testdb.SQLite, testdb.LibPQ, testdb.Pgx}

// open opens a fresh database of b, with the table items.
func open(t *testing.T, b testdb.Backend) backend {
	t.Helper()
	db := b.Open(t, testdb.Options{})
	raw := db.Driver().Pool()
	be := backend{db: db, raw: raw, sql: db.Driver().SchemaSQL(),
		tables: catalog(raw, `SELECT name FROM sqlite_master WHERE type = 'table'`)}
	if b.Postgres {
		be.tables = catalog(raw, `SELECT tablename FROM pg_tables WHERE schemaname = current_schema()`)
	}
	_, err := raw.ExecContext(t.Context(), `CREATE TABLE items (id TEXT PRIMARY KEY)`)
	require.NoError(t, err)
	return be
}

// eachBackend runs fn on a fresh database of each backend, in a subtest named by it.
func eachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	t.Helper()
	for _, be := range backends {
		t.Run(be.Name, func(t *testing.T) { fn(t, open(t, be)) })
	}
}

// catalog lists tables as the database's own catalog has them, not through the
// code under test.
func catalog(db *sql.DB, query string) func(t *testing.T) []string {
	return func(t *testing.T) []string {
		t.Helper()
		rows, err := db.QueryContext(t.Context(), query)
		names := testdb.Column[string](t, rows, err)
		sort.Strings(names)
		return names
	}
}

// runDryRun runs the script of a dry run of direction and o on b's database, as a DBA
// would, after checking that the dry run says want.
func runDryRun(t *testing.T, b backend, m *schema.Migrator, direction schema.Direction, o schema.MigrateOpts, want string) {
	t.Helper()
	o.DryRun = true
	p, err := m.Migrate(t.Context(), direction, &o)
	require.NoError(t, err)
	require.Equal(t, want, p.String())
	runScript(t, b.raw, p.SQL())
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

// migrator is b's migrator of cfg.
func (b backend) migrator(t *testing.T, cfg schema.Config) *schema.Migrator {
	t.Helper()
	m, err := schema.New(b.db, cfg)
	require.NoError(t, err)
	return m
}

// forEach runs run for each case on each backend, on a fresh database with the
// migrator of full.
func forEach[C any](t *testing.T, cases []C, name func(C) string, run func(t *testing.T, c C, b backend, m *schema.Migrator)) {
	for _, be := range backends {
		t.Run(be.Name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(name(c), func(t *testing.T) {
					b := open(t, be)
					run(t, c, b, b.migrator(t, full))
				})
			}
		})
	}
}

// sql is a migration's text, as a file of an fstest.MapFS.
func sqlFile(text string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(text)} }

// things is a component of a program's own, with its down migrations; held is one
// that runs after the sets, since it reads the holds table of items.
var (
	things = schema.Component{Name: "things", Migrations: fstest.MapFS{
		"0001_a.sql":      sqlFile(`CREATE TABLE things_a (id TEXT PRIMARY KEY)`),
		"0001_a.down.sql": sqlFile(`DROP TABLE things_a`),
		"0002_b.sql":      sqlFile(`CREATE TABLE things_b (id TEXT PRIMARY KEY)`),
		"0002_b.down.sql": sqlFile(`DROP TABLE things_b`),
	}}
	held = schema.Component{Name: "held", AfterSets: true, Migrations: fstest.MapFS{
		"0001_held.sql": sqlFile(`CREATE TABLE held AS SELECT object_id FROM items_holds`),
	}}
	// full is what a migrator of every component covers.
	full = schema.Config{Components: []schema.Component{held, things}, Sets: []schema.Set{{Table: "items"}}}
)

var (
	only     = []string{"items"}
	refsets  = []string{"items", "refset_collected", "refset_schema_version", "refset_sets"}
	all      = []string{"items", "items_holds", "items_review", "refset_collected", "refset_schema_version", "refset_sets"}
	allFull  = []string{"held", "items", "items_holds", "items_review", "refset_collected", "refset_schema_version", "refset_sets", "things_a", "things_b"}
	upToDate = "core 0 -> 2, things 0 -> 2, set:items 0 -> 3, held 0 -> 1"
)

// The migrator up, up to a target or by steps, down to a target, by one step or to 0,
// and dry runs of both, which list the SQL and change nothing (the catalog says so).
func TestMigrator(t *testing.T) {
	up, down := schema.DirectionUp, schema.DirectionDown
	type migratorCase struct {
		name      string
		before    bool // everything migrated up first
		direction schema.Direction
		opts      *schema.MigrateOpts
		want      string   // the result's String
		versions  []string // its versions' files, in order
		tables    []string // the catalog's afterwards
		// registration is the result's last step's Registration
		registration bool
	}
	cases := []migratorCase{
		{name: "up", direction: up, want: upToDate, tables: allFull, registration: false,
			versions: []string{"0001_sets.sql", "0002_collected.sql", "0001_a.sql", "0002_b.sql", "0001_holds.sql", "0002_review.sql", "0003_index_names.sql", "0001_held.sql"}},
		{name: "up to a target", direction: up, opts: &schema.MigrateOpts{Component: "things", TargetVersion: 1},
			want: "core 0 -> 2, things 0 -> 1", versions: []string{"0001_sets.sql", "0002_collected.sql", "0001_a.sql"},
			tables: []string{"items", "refset_collected", "refset_schema_version", "refset_sets", "things_a"}},
		{name: "up by a step", direction: up, opts: &schema.MigrateOpts{Component: "set:items", MaxSteps: 1},
			want: "core 0 -> 2, set:items 0 -> 1", versions: []string{"0001_sets.sql", "0002_collected.sql", "0001_holds.sql"}, registration: true,
			tables: []string{"items", "items_holds", "refset_collected", "refset_schema_version", "refset_sets"}},
		{name: "up to a target reached", before: true, direction: up, opts: &schema.MigrateOpts{Component: "things", TargetVersion: 1},
			tables: allFull},
		{name: "up again", before: true, direction: up, tables: allFull},
		{name: "down to a target", before: true, direction: down, opts: &schema.MigrateOpts{Component: "things", TargetVersion: 1},
			want: "things 2 -> 1", versions: []string{"0002_b.down.sql"},
			tables: []string{"held", "items", "items_holds", "items_review", "refset_collected", "refset_schema_version", "refset_sets", "things_a"}},
		{name: "down a step", before: true, direction: down, opts: &schema.MigrateOpts{Component: "set:items"},
			want: "set:items 3 -> 2", versions: []string{"0003_index_names.down.sql"}, tables: allFull},
		{name: "down to a set's target", before: true, direction: down, opts: &schema.MigrateOpts{Component: "set:items", TargetVersion: 1},
			want: "set:items 3 -> 1", versions: []string{"0003_index_names.down.sql", "0002_review.down.sql"},
			tables: []string{"held", "items", "items_holds", "refset_collected", "refset_schema_version", "refset_sets", "things_a", "things_b"}},
		{name: "down to 0", before: true, direction: down, opts: &schema.MigrateOpts{Component: "set:items", TargetVersion: -1},
			want: "set:items 3 -> 0", versions: []string{"0003_index_names.down.sql", "0002_review.down.sql", "0001_holds.down.sql"}, registration: true,
			tables: []string{"held", "items", "refset_collected", "refset_schema_version", "refset_sets", "things_a", "things_b"}},
		{name: "down by steps to a target", before: true, direction: down, opts: &schema.MigrateOpts{Component: "things", TargetVersion: 1, MaxSteps: 5},
			want: "things 2 -> 1", versions: []string{"0002_b.down.sql"},
			tables: []string{"held", "items", "items_holds", "items_review", "refset_collected", "refset_schema_version", "refset_sets", "things_a"}},
		{name: "dry run up", direction: up, opts: &schema.MigrateOpts{DryRun: true}, want: upToDate, tables: only,
			versions: []string{"0001_sets.sql", "0002_collected.sql", "0001_a.sql", "0002_b.sql", "0001_holds.sql", "0002_review.sql", "0003_index_names.sql", "0001_held.sql"}},
		{name: "dry run down", before: true, direction: down, opts: &schema.MigrateOpts{Component: "things", TargetVersion: -1, DryRun: true},
			want: "things 2 -> 0", versions: []string{"0002_b.down.sql", "0001_a.down.sql"}, tables: allFull},
	}
	forEach(t, cases, func(c migratorCase) string { return c.name }, func(t *testing.T, c migratorCase, b backend, m *schema.Migrator) {
		ctx := t.Context()
		if c.before {
			_, err := m.Migrate(ctx, up, nil)
			require.NoError(t, err)
		}
		dry := c.opts != nil && c.opts.DryRun

		res, err := m.Migrate(ctx, c.direction, c.opts)
		require.NoError(t, err)
		assert.Equal(t, c.want, res.String())
		assert.Equal(t, c.direction, res.Direction)
		assert.Equal(t, dry, res.DryRun)
		var versions []string
		for _, s := range res.Steps {
			for _, v := range s.Versions {
				versions = append(versions, v.Name)
				assert.NotEmpty(t, v.SQL, v.Name)
				assert.Contains(t, res.SQL(), v.SQL, "the script has every migration")
				if dry {
					assert.Zero(t, v.Duration, "%s did not run", v.Name)
				} else {
					assert.Positive(t, v.Duration, "%s ran", v.Name)
				}
			}
		}
		assert.Equal(t, c.versions, versions)
		if len(res.Steps) > 0 {
			assert.Equal(t, c.registration, res.Steps[len(res.Steps)-1].Registration)
		} else {
			assert.Empty(t, res.SQL())
		}
		assert.Equal(t, c.tables, b.tables(t))
		if !dry {
			return
		}
		// What a dry run listed is what the migration runs.
		ran, err := m.Migrate(ctx, c.direction, &schema.MigrateOpts{Component: c.opts.Component, TargetVersion: c.opts.TargetVersion})
		require.NoError(t, err)
		assert.Equal(t, res.String(), ran.String())
	})
}

// Mistakes are refused with the sentinel that names them, and change nothing, on a
// database migrated up.
func TestMigratorRefuses(t *testing.T) {
	cases := []struct {
		name      string
		cfg       *schema.Config // full when nil
		direction schema.Direction
		opts      *schema.MigrateOpts
		want      error
	}{
		{"no direction", nil, "", nil, refset.ErrInvalidConfig},
		{"down without a component", nil, schema.DirectionDown, &schema.MigrateOpts{TargetVersion: -1}, refset.ErrInvalidConfig},
		{"a target without a component", nil, schema.DirectionUp, &schema.MigrateOpts{TargetVersion: 1}, refset.ErrInvalidConfig},
		{"steps without a component", nil, schema.DirectionUp, &schema.MigrateOpts{MaxSteps: 1}, refset.ErrInvalidConfig},
		{"a component of no migrator", nil, schema.DirectionDown, &schema.MigrateOpts{Component: "blockmanager"}, refset.ErrInvalidConfig},
		{"a set not configured", nil, schema.DirectionDown, &schema.MigrateOpts{Component: "set:other"}, refset.ErrInvalidConfig},
		{"up beyond the latest", nil, schema.DirectionUp, &schema.MigrateOpts{Component: "things", TargetVersion: 3}, refset.ErrInvalidConfig},
		{"down to above", nil, schema.DirectionDown, &schema.MigrateOpts{Component: "things", TargetVersion: 3}, refset.ErrInvalidConfig},
		{"a negative target", nil, schema.DirectionDown, &schema.MigrateOpts{Component: "things", TargetVersion: -2}, refset.ErrInvalidConfig},
		{"up to -1", nil, schema.DirectionUp, &schema.MigrateOpts{Component: "things", TargetVersion: -1}, refset.ErrInvalidConfig},
		{"negative steps", nil, schema.DirectionDown, &schema.MigrateOpts{Component: "things", MaxSteps: -1}, refset.ErrInvalidConfig},
		{"no down file", nil, schema.DirectionDown, &schema.MigrateOpts{Component: "held"}, refset.ErrInvalidConfig},
		{"core to 0 under a set", nil, schema.DirectionDown, &schema.MigrateOpts{Component: "core", TargetVersion: -1}, refset.ErrReferenced},
		{"a set without its table", &schema.Config{Sets: []schema.Set{{Table: "items"}, {Table: "nosuch"}}},
			schema.DirectionUp, nil, refset.ErrSchema},
		{"a set whose key is two columns", &schema.Config{Sets: []schema.Set{{Table: "pairs"}}},
			schema.DirectionUp, nil, refset.ErrSchema},
		{"a set whose ID is not its key", &schema.Config{Sets: []schema.Set{{Table: "things_a", IDColumn: "other"}}},
			schema.DirectionUp, nil, refset.ErrSchema},
	}
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		_, err := b.migrator(t, full).Migrate(ctx, schema.DirectionUp, nil)
		require.NoError(t, err)
		_, err = b.raw.ExecContext(ctx, `CREATE TABLE pairs (a TEXT, b TEXT, PRIMARY KEY (a, b))`)
		require.NoError(t, err)
		before := b.tables(t)
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				cfg := full
				if c.cfg != nil {
					cfg = *c.cfg
				}
				m := b.migrator(t, cfg)
				for _, dry := range []bool{false, true} {
					opts := schema.MigrateOpts{DryRun: dry}
					if c.opts != nil {
						opts = *c.opts
						opts.DryRun = dry
					}
					_, err := m.Migrate(ctx, c.direction, &opts)
					require.ErrorIs(t, err, c.want, "dry run %v", dry)
					assert.Equal(t, before, b.tables(t), "nothing changed")
				}
			})
		}
		require.NoError(t, b.migrator(t, full).Validate(ctx), "every version still recorded")
	})
}

// New refuses a configuration that cannot work, before it reads the database.
func TestNewRefuses(t *testing.T) {
	db := testdb.SQLite.Open(t, testdb.Options{})
	files := fstest.MapFS{"0001_a.sql": sqlFile(`SELECT 1`)}
	for _, c := range []struct {
		name string
		db   refset.Database
		cfg  schema.Config
		want error
	}{
		{"no database", nil, schema.Config{}, refset.ErrInvalidConfig},
		{"a component without a name", db, schema.Config{Components: []schema.Component{{Migrations: files}}}, refset.ErrInvalidConfig},
		{"a component named core", db, schema.Config{Components: []schema.Component{{Name: "core", Migrations: files}}}, refset.ErrInvalidConfig},
		{"a component named as a set", db, schema.Config{Components: []schema.Component{{Name: "set:items", Migrations: files}}}, refset.ErrInvalidConfig},
		{"a component twice", db, schema.Config{Components: []schema.Component{{Name: "a", Migrations: files}, {Name: "a", Migrations: files}}}, refset.ErrInvalidConfig},
		{"a component without files", db, schema.Config{Components: []schema.Component{{Name: "a"}}}, refset.ErrInvalidConfig},
		{"a misnamed file", db, schema.Config{Components: []schema.Component{{Name: "a", Migrations: fstest.MapFS{"a.sql": sqlFile(`SELECT 1`)}}}}, refset.ErrInvalidConfig},
		{"a set twice", db, schema.Config{Sets: []schema.Set{{Table: "items"}, {Table: "items", HoldsTable: "h"}}}, refset.ErrInvalidConfig},
		{"a set's bad name", db, schema.Config{Sets: []schema.Set{{Table: "bad name"}}}, refset.ErrInvalidIdentifier},
		{"a set's bad ID column", db, schema.Config{Sets: []schema.Set{{Table: "items", IDColumn: "a.b"}}}, refset.ErrInvalidIdentifier},
		{"a set's bad holds table", db, schema.Config{Sets: []schema.Set{{Table: "items", HoldsTable: "x;"}}}, refset.ErrInvalidIdentifier},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := schema.New(c.db, c.cfg)
			require.ErrorIs(t, err, c.want)
		})
	}
	// A Migrator not made by New compiles, and says so instead of panicking.
	_, err := (&schema.Migrator{}).Migrate(t.Context(), schema.DirectionUp, nil)
	require.ErrorIs(t, err, refset.ErrInvalidConfig)
	require.ErrorIs(t, (&schema.Migrator{}).Validate(t.Context()), refset.ErrInvalidConfig)
	assert.Empty(t, (&schema.PendingError{}).Plan.SQL())
	assert.Contains(t, (&schema.PendingError{}).Error(), "schema mismatch")
}

// Validate is nil on a database at the versions the code needs, and otherwise a
// *PendingError (ErrSchema) whose plan says what is behind and carries the script,
// changing nothing; the script, run by a DBA, brings the database up to date.
func TestValidate(t *testing.T) {
	type validateCase struct {
		name   string
		before *schema.MigrateOpts // migrated up first with these, if not nil
		want   string              // the plan; "" for up to date
		tables []string
	}
	cases := []validateCase{
		{name: "empty", want: upToDate, tables: only},
		{name: "behind", before: &schema.MigrateOpts{Component: "things", TargetVersion: 1},
			want: "things 1 -> 2, set:items 0 -> 3, held 0 -> 1", tables: []string{"items", "refset_collected", "refset_schema_version", "refset_sets", "things_a"}},
		{name: "a set unregistered", before: &schema.MigrateOpts{},
			want: "set:items registration", tables: allFull},
		{name: "up to date", before: &schema.MigrateOpts{}, tables: allFull},
	}
	forEach(t, cases, func(c validateCase) string { return c.name }, func(t *testing.T, c validateCase, b backend, m *schema.Migrator) {
		ctx := t.Context()
		if c.before != nil {
			_, err := m.Migrate(ctx, schema.DirectionUp, c.before)
			require.NoError(t, err)
		}
		if c.name == "a set unregistered" {
			_, err := b.raw.ExecContext(ctx, `DELETE FROM refset_sets`)
			require.NoError(t, err)
		}
		err := m.Validate(ctx)
		assert.Equal(t, c.tables, b.tables(t), "Validate created nothing")
		if c.want == "" {
			require.NoError(t, err)
			return
		}
		require.ErrorIs(t, err, refset.ErrSchema)
		var pe *schema.PendingError
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, c.want, pe.Plan.String())
		assert.Contains(t, err.Error(), c.want)
		assert.True(t, pe.Plan.DryRun)

		runScript(t, b.raw, pe.Plan.SQL()) // the DBA's part
		require.NoError(t, m.Validate(ctx))
		assert.Equal(t, allFull, b.tables(t))
	})
}

// Migrate says which component went from which version to which, and nothing when all
// was done already, also after a set's tables were dropped behind refset's back.
func TestMigrateReports(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()

		done, err := b.migrator(t, schema.Config{}).Migrate(ctx, schema.DirectionUp, nil)
		require.NoError(t, err)
		assert.Equal(t, "core 0 -> 2", done.String())

		m := b.migrator(t, schema.Config{Sets: []schema.Set{{Table: "items"}}})
		done, err = m.Migrate(ctx, schema.DirectionUp, nil)
		require.NoError(t, err)
		assert.Equal(t, "set:items 0 -> 3", done.String())
		assert.Equal(t, all, b.tables(t))

		done, err = m.Migrate(ctx, schema.DirectionUp, nil)
		require.NoError(t, err)
		assert.Empty(t, done.Steps, "all up to date")

		_, err = b.raw.ExecContext(ctx, `DROP TABLE items_review`)
		require.NoError(t, err)
		done, err = m.Migrate(ctx, schema.DirectionUp, nil)
		require.NoError(t, err)
		require.Len(t, done.Steps, 1)
		assert.Equal(t, schema.Step{Component: "set:items", From: 0, To: 3, Versions: done.Steps[0].Versions}, done.Steps[0],
			"a lost table's migrations run again")
		assert.Equal(t, all, b.tables(t))
	})
}

// A dry run reads what is missing and changes nothing; its script, run by a DBA,
// brings the database to where Migrate would have, versions recorded and set
// registered included, and running it twice does no harm.
func TestDryRunScript(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		m := b.migrator(t, schema.Config{Sets: []schema.Set{{Table: "items"}}})
		dry := &schema.MigrateOpts{DryRun: true}

		p, err := m.Migrate(ctx, schema.DirectionUp, dry)
		require.NoError(t, err)
		assert.Equal(t, "core 0 -> 2, set:items 0 -> 3", p.String())
		require.Len(t, p.Steps, 2)
		assert.True(t, p.Steps[1].Registration)
		assert.Equal(t, only, b.tables(t), "a dry run created nothing")
		text := p.SQL()
		assert.Contains(t, text, "CREATE TABLE IF NOT EXISTS \"items_holds\"")

		runScript(t, b.raw, text)
		assert.Equal(t, all, b.tables(t))
		p, err = m.Migrate(ctx, schema.DirectionUp, dry)
		require.NoError(t, err)
		assert.Empty(t, p.Steps)
		assert.Empty(t, p.SQL())
		done, err := m.Migrate(ctx, schema.DirectionUp, nil)
		require.NoError(t, err)
		assert.Empty(t, done.Steps, "the script recorded the versions")
		r, err := b.sql.Lookup(ctx, b.db.Reader(), sqlident.Ident{Name: "items"})
		require.NoError(t, err, "the script registered the set")
		assert.Equal(t, sqlident.Ident{Name: "items_holds"}, r.Holds)

		runScript(t, b.raw, text) // twice does no harm

		// Half done: the record of the set lost; only it is pending.
		_, err = b.raw.ExecContext(ctx, `DELETE FROM refset_schema_version WHERE component = 'set:items'`)
		require.NoError(t, err)
		p, err = m.Migrate(ctx, schema.DirectionUp, dry)
		require.NoError(t, err)
		assert.Equal(t, "set:items 0 -> 3", p.String())
		assert.False(t, p.Steps[0].Registration, "still registered")
	})
}

// Down and up again: the tables go and come back, and the records follow.
func TestMigrateDownRoundTrip(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		m := b.migrator(t, schema.Config{Sets: []schema.Set{{Table: "items"}}})
		_, err := m.Migrate(ctx, schema.DirectionUp, nil)
		require.NoError(t, err)
		down := func(component string, target int) string {
			t.Helper()
			res, err := m.Migrate(ctx, schema.DirectionDown, &schema.MigrateOpts{Component: component, TargetVersion: target})
			require.NoError(t, err)
			return res.String()
		}

		assert.Equal(t, "set:items 3 -> 1", down("set:items", 1))
		assert.Equal(t, []string{"items", "items_holds", "refset_collected", "refset_schema_version", "refset_sets"}, b.tables(t))

		assert.Equal(t, "set:items 1 -> 0", down("set:items", -1))
		_, err = b.sql.Lookup(ctx, b.db.Reader(), sqlident.Ident{Name: "items"})
		require.ErrorIs(t, err, refset.ErrNotFound, "the registration went with the set")

		assert.Equal(t, "core 2 -> 0", down("core", -1))
		assert.Equal(t, []string{"items", "refset_schema_version"}, b.tables(t))
		assert.Empty(t, down("core", -1), "nothing to do")

		done, err := m.Migrate(ctx, schema.DirectionUp, nil)
		require.NoError(t, err)
		assert.Equal(t, "core 0 -> 2, set:items 0 -> 3", done.String())
		assert.Equal(t, all, b.tables(t))
	})
}

// Several migrators at once, as several processes starting together: each version
// runs once, and the others find nothing to do.
func TestMigratorsAtOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		results := make(chan *schema.MigrateResult, 4)
		errs := make(chan error, 4)
		for range 4 {
			m := b.migrator(t, full)
			go func() {
				res, err := m.Migrate(ctx, schema.DirectionUp, nil)
				results <- res
				errs <- err
			}()
		}
		ran := 0
		for range 4 {
			require.NoError(t, <-errs)
			if res := <-results; len(res.Steps) > 0 {
				ran++
				assert.Equal(t, upToDate, res.String())
			}
		}
		assert.Equal(t, 1, ran, "one migrator did the work")
		assert.Equal(t, allFull, b.tables(t))
	})
}

// A DBA's scripts up, down and up again: each down script updates the record of
// versions (and, taking a set to 0, its registration) as the up script writes them
// and as Migrate does, so that after each script the record says where the tables
// are and a dry run finds nothing to do at that target.
func TestScriptsDownAndUpKeepTheRecord(t *testing.T) {
	cfg := schema.Config{Components: []schema.Component{things}, Sets: []schema.Set{{Table: "items"}}}
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		m := b.migrator(t, cfg)
		versions := func() map[string]int {
			t.Helper()
			got := map[string]int{}
			for _, c := range []string{"core", "things", "set:items"} {
				v, err := b.sql.Version(ctx, b.db.Reader(), c)
				require.NoError(t, err)
				got[c] = v
			}
			return got
		}
		registered := func() bool {
			t.Helper()
			_, err := b.sql.Lookup(ctx, b.db.Reader(), sqlident.Ident{Name: "items"})
			if errors.Is(err, refset.ErrNotFound) {
				return false
			}
			require.NoError(t, err)
			return true
		}

		runDryRun(t, b, m, schema.DirectionUp, schema.MigrateOpts{}, "core 0 -> 2, things 0 -> 2, set:items 0 -> 3")
		assert.Equal(t, map[string]int{"core": 2, "things": 2, "set:items": 3}, versions(), "up")
		assert.True(t, registered())

		runDryRun(t, b, m, schema.DirectionDown, schema.MigrateOpts{Component: "things"}, "things 2 -> 1")
		assert.Equal(t, map[string]int{"core": 2, "things": 1, "set:items": 3}, versions(), "things down a step")
		runDryRun(t, b, m, schema.DirectionDown, schema.MigrateOpts{Component: "set:items", TargetVersion: -1}, "set:items 3 -> 0")
		assert.Equal(t, map[string]int{"core": 2, "things": 1, "set:items": 0}, versions(), "the set down to 0")
		assert.False(t, registered(), "the registration went with the set")
		runDryRun(t, b, m, schema.DirectionDown, schema.MigrateOpts{Component: "core", TargetVersion: -1}, "core 2 -> 0")
		assert.Equal(t, map[string]int{"core": 0, "things": 1, "set:items": 0}, versions(), "core down to 0")
		assert.Equal(t, []string{"items", "refset_schema_version", "things_a"}, b.tables(t))

		runDryRun(t, b, m, schema.DirectionUp, schema.MigrateOpts{}, "core 0 -> 2, things 1 -> 2, set:items 0 -> 3")
		assert.Equal(t, map[string]int{"core": 2, "things": 2, "set:items": 3}, versions(), "up again")
		assert.True(t, registered())
		assert.Equal(t, []string{"items", "items_holds", "items_review", "refset_collected", "refset_schema_version", "refset_sets", "things_a", "things_b"}, b.tables(t))
		done, err := m.Migrate(ctx, schema.DirectionUp, nil)
		require.NoError(t, err)
		assert.Empty(t, done.Steps, "the scripts left nothing for Migrate")
	})
}
