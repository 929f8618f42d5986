package schema

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/refsetdb/refset/internal/sqltext"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/sqlident"
)

// Dialect names the SQL dialect a database speaks.
type Dialect string

const (
	SQLite   Dialect = "sqlite"
	Postgres Dialect = "postgres"
)

// SQL is a dialect's own part of refset's schema, which its store provides (all of a
// store's SQL lives in the store's folder): the migration files and the few
// statements the runner needs that differ between databases. store/sqlite and
// store/postgres implement it; do not implement it outside a store.
type SQL interface {
	// Dialect names the dialect.
	Dialect() Dialect
	// Migrations holds core/NNNN_name.sql, refset's own tables, and
	// set/NNNN_name.sql, the templates of each set's holds table and review queue.
	Migrations() fs.FS
	// LockMigrations serialises schema changes of the database across processes
	// until tx ends.
	LockMigrations(ctx context.Context, tx refset.Tx) error
	// TableExists looks table up as the statements that use it will (on Postgres an
	// unqualified name through search_path).
	TableExists(ctx context.Context, q refset.Querier, table sqlident.Ident) (bool, error)
}

// Set describes the object table a set's migrations are written for.
type Set struct {
	Table    sqlident.Ident // the object table
	IDColumn string         // its one-column primary key
	IDType   string         // that column's type, as the catalog writes it
	Holds    sqlident.Ident // the holds table to create
	Queue    sqlident.Ident // the review queue to create (package cleanup fills it)
}

// Migration is one embedded SQL file.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations lists a dialect's migrations of one kind, "core" or "set", in version
// order. Set migrations are templates, rendered by MigrateSet.
func Migrations(s SQL, kind string) ([]Migration, error) {
	sub, err := fs.Sub(s.Migrations(), kind)
	if err != nil {
		return nil, err
	}
	ms, err := readMigrations(sub)
	if err != nil {
		return nil, fmt.Errorf("refset/schema: %s migrations for dialect %q: %w", kind, s.Dialect(), err)
	}
	return ms, nil
}

// downSuffix ends the name of a down migration, NNNN_name.down.sql, which undoes the
// up migration NNNN of the same folder.
const downSuffix = ".down.sql"

// readMigrations reads the up migrations, the files NNNN_name.sql at the root of fsys
// (not the NNNN_name.down.sql beside them), in version order.
func readMigrations(fsys fs.FS) ([]Migration, error) {
	ms, err := readFiles(fsys, false)
	if err == nil && len(ms) == 0 {
		err = fmt.Errorf("no migrations")
	}
	return ms, err
}

// readFiles reads the up (down false) or the down migrations at the root of fsys, in
// version order.
func readFiles(fsys fs.FS, down bool) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, err
	}
	var ms []Migration
	seen := map[int]string{}
	for _, e := range entries {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || !strings.HasSuffix(name, ".sql") {
			return nil, fmt.Errorf("bad migration file name %s (want NNNN_name.sql or NNNN_name%s)", name, downSuffix)
		}
		if strings.HasSuffix(name, downSuffix) != down {
			continue
		}
		if other, dup := seen[v]; dup {
			return nil, fmt.Errorf("two migrations of version %d: %s and %s", v, other, name)
		}
		seen[v] = name
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: name, SQL: string(body)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	return ms, nil
}

// Applied is what a migration did to one component (core, set:<table>, or a
// component of MigrateFS): its recorded version went from From to To. From is 0 when
// the component was new, or when its tables were gone and its migrations ran again.
// To is below From for MigrateDown.
type Applied struct {
	Component string
	From, To  int
}

func (a Applied) String() string { return fmt.Sprintf("%s %d -> %d", a.Component, a.From, a.To) }

// MigrateFS applies another component's migrations, the files NNNN_name.sql at the
// root of fsys (written for the dialect of s), after refset's core ones, recording
// their versions under component. Packages built on refset (blockmanager) keep their
// tables this way. It is idempotent and safe to run from several processes at once.
func MigrateFS(ctx context.Context, db refset.Database, d SQL, component string, fsys fs.FS) error {
	_, err := ApplyFS(ctx, db, d, component, fsys)
	return err
}

// ApplyFS is MigrateFS, and reports what it did: one Applied for each component
// (core, then component) whose version changed, none when all was up to date.
func ApplyFS(ctx context.Context, db refset.Database, d SQL, component string, fsys fs.FS) ([]Applied, error) {
	ms, err := readMigrations(fsys)
	if err != nil {
		return nil, fmt.Errorf("refset/schema: %s: %w", component, err)
	}
	var done []Applied
	err = refset.InTx(ctx, db, func(tx refset.Tx) error {
		done = done[:0] // a retried transaction starts over
		if err := migrate(ctx, tx, d, &done); err != nil {
			return err
		}
		return apply(ctx, tx, d, component, ms, &done)
	})
	if err != nil {
		return nil, err
	}
	return done, nil
}

// Migrate brings refset's core tables up to date. It is idempotent and safe to run
// from several processes at once.
func Migrate(ctx context.Context, db refset.Database, d SQL) error {
	_, err := Apply(ctx, db, d)
	return err
}

// Registered is a set as MigrateSet recorded it in refset_sets.
type Registered struct {
	Table    sqlident.Ident
	IDColumn string
	Holds    sqlident.Ident
	Queue    sqlident.Ident
}

// Lookup reads the registration of the set on table (written as the set's store was
// configured), or fails with refset.ErrNotFound if no store was ever built on it.
func Lookup(ctx context.Context, q refset.Querier, d Dialect, table sqlident.Ident) (Registered, error) {
	var idColumn, holds, queue string
	err := q.QueryRowContext(ctx, d.Rebind(`SELECT id_column, holds_table, queue_table FROM refset_sets WHERE table_name = ?`),
		table.String()).Scan(&idColumn, &holds, &queue)
	if errors.Is(err, sql.ErrNoRows) {
		return Registered{}, fmt.Errorf("refset/schema: no set on table %s (build its store first): %w", table, refset.ErrNotFound)
	}
	if err != nil {
		return Registered{}, err
	}
	r := Registered{Table: table, IDColumn: idColumn}
	if r.Holds, err = sqlident.Parse(holds, true); err != nil {
		return Registered{}, err
	}
	if r.Queue, err = sqlident.Parse(queue, true); err != nil {
		return Registered{}, err
	}
	return r, nil
}

// MigrateSet brings the tables of one set (its holds table and review queue) up to
// date, after the core ones, and registers the set in refset_sets. It is idempotent
// and safe to run from several processes at once.
func MigrateSet(ctx context.Context, db refset.Database, d SQL, set Set) error {
	_, err := Apply(ctx, db, d, set)
	return err
}

// Apply brings refset's core tables and those of each set up to date in one
// transaction, as Migrate and MigrateSet do, and reports what it did: one Applied for
// each component whose version changed, core first, none when all was up to date. A
// program that migrates at start-up can log it; an empty report on a database that
// should have needed work says another process got there first.
func Apply(ctx context.Context, db refset.Database, d SQL, sets ...Set) ([]Applied, error) {
	rendered := make([][]Migration, len(sets))
	for i, set := range sets {
		ms, err := setMigrations(d, set, false)
		if err != nil {
			return nil, err
		}
		rendered[i] = ms
	}
	var done []Applied
	err := refset.InTx(ctx, db, func(tx refset.Tx) error {
		done = done[:0] // a retried transaction starts over
		if err := migrate(ctx, tx, d, &done); err != nil {
			return err
		}
		for i, set := range sets {
			component := setComponent(set.Table)
			if err := forgetIfGone(ctx, tx, d, component, set.Holds, set.Queue); err != nil {
				return err
			}
			if err := apply(ctx, tx, d, component, rendered[i], &done); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, d.Dialect().Rebind(registerSQL), set.Table.String(), set.IDColumn, set.Holds.String(), set.Queue.String()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return done, nil
}

// registerSQL records a set in refset_sets, where tools (clean-up, check) find it.
const registerSQL = `INSERT INTO refset_sets (table_name, id_column, holds_table, queue_table) VALUES (?, ?, ?, ?)
			ON CONFLICT (table_name) DO UPDATE SET id_column = excluded.id_column,
				holds_table = excluded.holds_table, queue_table = excluded.queue_table`

// setComponent is the component under which a set's versions are recorded.
func setComponent(table sqlident.Ident) string { return "set:" + table.String() }

// setMigrations are the set migrations of d (the down ones if down) rendered for set.
func setMigrations(d SQL, set Set, down bool) ([]Migration, error) {
	if err := sqlident.CheckType(set.IDType); err != nil && !down {
		return nil, err
	}
	if _, err := sqlident.Parse(set.IDColumn, false); err != nil {
		return nil, err
	}
	var ms []Migration
	var err error
	if down {
		ms, err = downMigrations(d, "set")
	} else {
		ms, err = Migrations(d, "set")
	}
	if err != nil {
		return nil, err
	}
	data := map[string]string{
		"Table":     set.Table.Quoted(),
		"IDColumn":  `"` + set.IDColumn + `"`,
		"IDType":    set.IDType,
		"Holds":     set.Holds.Quoted(),
		"HoldsName": set.Holds.Name,
		"Queue":     set.Queue.Quoted(),
		"QueueName": set.Queue.Name,
	}
	for i, m := range ms {
		var b bytes.Buffer
		t, err := template.New(m.Name).Option("missingkey=error").Parse(m.SQL)
		if err == nil {
			err = t.Execute(&b, data)
		}
		if err != nil {
			return nil, fmt.Errorf("refset/schema: %s: %w", m.Name, err)
		}
		ms[i].SQL = b.String()
	}
	return ms, nil
}

// downMigrations lists a dialect's down migrations of one kind, in version order.
func downMigrations(s SQL, kind string) ([]Migration, error) {
	sub, err := fs.Sub(s.Migrations(), kind)
	if err != nil {
		return nil, err
	}
	ms, err := readFiles(sub, true)
	if err != nil {
		return nil, fmt.Errorf("refset/schema: %s down migrations for dialect %q: %w", kind, s.Dialect(), err)
	}
	return ms, nil
}

// Lock serialises schema changes (migrations, clean-up installs) of one database
// across processes until tx ends: an advisory lock on Postgres; on SQLite the write
// transaction itself already excludes every other writer.
func Lock(ctx context.Context, tx refset.Tx, d SQL) error { return d.LockMigrations(ctx, tx) }

// versionTableSQL creates the table of recorded versions.
const versionTableSQL = `CREATE TABLE IF NOT EXISTS refset_schema_version (
	component TEXT NOT NULL PRIMARY KEY,
	version   INTEGER NOT NULL
)`

func migrate(ctx context.Context, tx refset.Tx, d SQL, done *[]Applied) error {
	// Held to the end of the transaction: a second process waits here, then finds
	// everything applied.
	if err := Lock(ctx, tx, d); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, versionTableSQL); err != nil {
		return err
	}
	if err := forgetIfGone(ctx, tx, d, "core", coreTable); err != nil {
		return err
	}
	ms, err := Migrations(d, "core")
	if err != nil {
		return err
	}
	return apply(ctx, tx, d, "core", ms, done)
}

// coreTable is the table whose absence says the core migrations must run again.
var coreTable = sqlident.Ident{Name: "refset_sets"}

// forgetIfGone forgets the versions recorded for component when any of the tables its
// migrations create is missing, so that apply runs them all again. The record and
// the tables part ways when tables are dropped without refset: a test resets its
// fixtures, an operator drops a Postgres schema with CASCADE while refset's
// bookkeeping lives in another one. Running the migrations again is safe because
// every one of them creates only what does not exist (IF NOT EXISTS), which is why
// they must stay written that way.
func forgetIfGone(ctx context.Context, tx refset.Tx, d SQL, component string, tables ...sqlident.Ident) error {
	gone, err := anyGone(ctx, tx, d, tables)
	if err != nil || !gone {
		return err
	}
	_, err = tx.ExecContext(ctx, d.Dialect().Rebind(`DELETE FROM refset_schema_version WHERE component = ?`), component)
	return err
}

// anyGone reports whether any of tables is missing.
func anyGone(ctx context.Context, q refset.Querier, d SQL, tables []sqlident.Ident) (bool, error) {
	for _, table := range tables {
		found, err := d.TableExists(ctx, q, table)
		if err != nil {
			return false, fmt.Errorf("refset/schema: looking for %s: %w", table, err)
		}
		if !found {
			return true, nil
		}
	}
	return false, nil
}

// recorded is the version recorded for component, 0 if none.
func recorded(ctx context.Context, q refset.Querier, d SQL, component string) (int, error) {
	var current int
	err := q.QueryRowContext(ctx, d.Dialect().Rebind(`SELECT COALESCE(MAX(version), 0) FROM refset_schema_version WHERE component = ?`),
		component).Scan(&current)
	return current, err
}

// apply runs the migrations of component newer than its recorded version, and adds
// to done what changed.
func apply(ctx context.Context, tx refset.Tx, d SQL, component string, ms []Migration, done *[]Applied) error {
	from, err := recorded(ctx, tx, d, component)
	if err != nil {
		return err
	}
	current := from
	for _, m := range ms {
		if m.Version <= current {
			continue
		}
		if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
			return fmt.Errorf("refset/schema: %s %s: %w", component, m.Name, err)
		}
		current = m.Version
	}
	if current == from {
		return nil
	}
	*done = append(*done, Applied{Component: component, From: from, To: current})
	return setVersion(ctx, tx, d, component, current)
}

// setVersion records component at version; at 0 it forgets the component.
func setVersion(ctx context.Context, tx refset.Tx, d SQL, component string, version int) error {
	if version == 0 {
		_, err := tx.ExecContext(ctx, d.Dialect().Rebind(`DELETE FROM refset_schema_version WHERE component = ?`), component)
		return err
	}
	_, err := tx.ExecContext(ctx, d.Dialect().Rebind(`INSERT INTO refset_schema_version (component, version) VALUES (?, ?)
		ON CONFLICT (component) DO UPDATE SET version = excluded.version`), component, version)
	return err
}

// Rebind writes the dialect's placeholders into a statement written with ?
// placeholders: $1, $2, ... on Postgres (a ? in a literal, a quoted name or a comment
// stays as it is); SQLite takes ? as it is.
func (d Dialect) Rebind(q string) string {
	if d != Postgres {
		return q
	}
	return sqltext.Dollar(q)
}

// SQLOf is the migrations of db's dialect: every store's driver has them.
func SQLOf(db refset.Database) (SQL, error) {
	drv := db.Driver()
	if s, ok := drv.(interface{ SchemaSQL() SQL }); ok {
		return s.SchemaSQL(), nil
	}
	return nil, fmt.Errorf("refset/schema: %w: %T has no migrations", refset.ErrInvalidConfig, drv)
}
