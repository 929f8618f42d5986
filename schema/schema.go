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

// readMigrations reads the files NNNN_name.sql at the root of fsys, in version order.
func readMigrations(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, e := range entries {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || !strings.HasSuffix(name, ".sql") {
			return nil, fmt.Errorf("bad migration file name %s (want NNNN_name.sql)", name)
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: name, SQL: string(body)})
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("no migrations")
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	return ms, nil
}

// MigrateFS applies another component's migrations, the files NNNN_name.sql at the
// root of fsys (written for the dialect of s), after refset's core ones, recording
// their versions under component. Packages built on refset (blockmanager) keep their
// tables this way. It is idempotent and safe to run from several processes at once.
func MigrateFS(ctx context.Context, db refset.Database, d SQL, component string, fsys fs.FS) error {
	ms, err := readMigrations(fsys)
	if err != nil {
		return fmt.Errorf("refset/schema: %s: %w", component, err)
	}
	return refset.InTx(ctx, db, func(tx refset.Tx) error {
		if err := migrate(ctx, tx, d); err != nil {
			return err
		}
		return apply(ctx, tx, d, component, ms)
	})
}

// Migrate brings refset's core tables up to date. It is idempotent and safe to run
// from several processes at once.
func Migrate(ctx context.Context, db refset.Database, d SQL) error {
	return refset.InTx(ctx, db, func(tx refset.Tx) error {
		return migrate(ctx, tx, d)
	})
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

// MigrateSet brings the tables of one set (its holds table and review queue) up to date, after the
// core ones, and registers the set in refset_sets. It is idempotent and safe to run
// from several processes at once.
func MigrateSet(ctx context.Context, db refset.Database, d SQL, set Set) error {
	if err := sqlident.CheckType(set.IDType); err != nil {
		return err
	}
	if _, err := sqlident.Parse(set.IDColumn, false); err != nil {
		return err
	}
	return refset.InTx(ctx, db, func(tx refset.Tx) error {
		if err := migrate(ctx, tx, d); err != nil {
			return err
		}
		ms, err := Migrations(d, "set")
		if err != nil {
			return err
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
				return fmt.Errorf("refset/schema: %s: %w", m.Name, err)
			}
			ms[i].SQL = b.String()
		}
		component := "set:" + set.Table.String()
		if err := forgetIfGone(ctx, tx, d, component, set.Holds, set.Queue); err != nil {
			return err
		}
		if err := apply(ctx, tx, d, component, ms); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, d.Dialect().Rebind(`INSERT INTO refset_sets (table_name, id_column, holds_table, queue_table) VALUES (?, ?, ?, ?)
			ON CONFLICT (table_name) DO UPDATE SET id_column = excluded.id_column,
				holds_table = excluded.holds_table, queue_table = excluded.queue_table`),
			set.Table.String(), set.IDColumn, set.Holds.String(), set.Queue.String())
		return err
	})
}

// Lock serialises schema changes (migrations, clean-up installs) of one database
// across processes until tx ends: an advisory lock on Postgres; on SQLite the write
// transaction itself already excludes every other writer.
func Lock(ctx context.Context, tx refset.Tx, d SQL) error { return d.LockMigrations(ctx, tx) }

func migrate(ctx context.Context, tx refset.Tx, d SQL) error {
	// Held to the end of the transaction: a second process waits here, then finds
	// everything applied.
	if err := Lock(ctx, tx, d); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS refset_schema_version (
		component TEXT NOT NULL PRIMARY KEY,
		version   INTEGER NOT NULL
	)`); err != nil {
		return err
	}
	if err := forgetIfGone(ctx, tx, d, "core", sqlident.Ident{Name: "refset_sets"}); err != nil {
		return err
	}
	ms, err := Migrations(d, "core")
	if err != nil {
		return err
	}
	return apply(ctx, tx, d, "core", ms)
}

// forgetIfGone forgets the versions recorded for component when any of the tables its
// migrations create is missing, so that apply runs them all again. The record and
// the tables part ways when tables are dropped without refset: a test resets its
// fixtures, an operator drops a Postgres schema with CASCADE while refset's
// bookkeeping lives in another one. Running the migrations again is safe because
// every one of them creates only what does not exist (IF NOT EXISTS), which is why
// they must stay written that way.
func forgetIfGone(ctx context.Context, tx refset.Tx, d SQL, component string, tables ...sqlident.Ident) error {
	for _, table := range tables {
		found, err := d.TableExists(ctx, tx, table)
		if err != nil {
			return fmt.Errorf("refset/schema: looking for %s: %w", table, err)
		}
		if !found {
			_, err := tx.ExecContext(ctx, d.Dialect().Rebind(`DELETE FROM refset_schema_version WHERE component = ?`), component)
			return err
		}
	}
	return nil
}

// apply runs the migrations of component newer than its recorded version.
func apply(ctx context.Context, tx refset.Tx, d SQL, component string, ms []Migration) error {
	var current int
	err := tx.QueryRowContext(ctx, d.Dialect().Rebind(`SELECT COALESCE(MAX(version), 0) FROM refset_schema_version WHERE component = ?`),
		component).Scan(&current)
	if err != nil {
		return err
	}
	for _, m := range ms {
		if m.Version <= current {
			continue
		}
		if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
			return fmt.Errorf("refset/schema: %s %s: %w", component, m.Name, err)
		}
		current = m.Version
	}
	_, err = tx.ExecContext(ctx, d.Dialect().Rebind(`INSERT INTO refset_schema_version (component, version) VALUES (?, ?)
		ON CONFLICT (component) DO UPDATE SET version = excluded.version`), component, current)
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
