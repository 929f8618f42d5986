// Package refsettables is the SQL both stores run on refset's own tables: the record
// of versions (refset_schema_version), the registry of sets (refset_sets) and the
// sets' holds tables. The statements are the same in both dialects but for their
// placeholders and the clock, which each store supplies; keeping them once here keeps
// the two stores from drifting apart.
package refsettables

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"
	"github.com/refsetdb/refset/store/internal/cleanupsql"
)

// Tables implements the statements of refsetdriver.SchemaSQL on refset's own tables for
// one dialect; a store's schema SQL embeds it.
type Tables struct {
	rebind func(string) string
	exists func(ctx context.Context, q refset.Querier, table sqlident.Ident) (bool, error)
	clock  refsetdriver.Clock
}

// New returns the Tables of a dialect whose placeholders rebind writes (from ?),
// whose catalog exists reads and whose clock is clock.
func New(rebind func(string) string, exists func(ctx context.Context, q refset.Querier, table sqlident.Ident) (bool, error),
	clock refsetdriver.Clock,
) Tables {
	return Tables{rebind: rebind, exists: exists, clock: clock}
}

var (
	versionTable = sqlident.Ident{Name: "refset_schema_version"}
	setTable     = sqlident.Ident{Name: "refset_sets"}
)

// VersionTable creates the record of versions.
func (Tables) VersionTable() string {
	return `CREATE TABLE IF NOT EXISTS refset_schema_version (
	component TEXT NOT NULL PRIMARY KEY,
	version   INTEGER NOT NULL
)`
}

// TableExists reads the dialect's catalog.
func (t Tables) TableExists(ctx context.Context, q refset.Querier, table sqlident.Ident) (bool, error) {
	return t.exists(ctx, q, table)
}

func (t Tables) HasVersionTable(ctx context.Context, q refset.Querier) (bool, error) {
	return t.exists(ctx, q, versionTable)
}

func (t Tables) Version(ctx context.Context, q refset.Querier, component string) (int, error) {
	var v int
	err := q.QueryRowContext(ctx, t.rebind(`SELECT COALESCE(MAX(version), 0) FROM refset_schema_version WHERE component = ?`),
		component).Scan(&v)
	return v, err
}

const (
	setVersionSQL = `INSERT INTO refset_schema_version (component, version) VALUES (?, ?)
	ON CONFLICT (component) DO UPDATE SET version = excluded.version`
	forgetVersionSQL = `DELETE FROM refset_schema_version WHERE component = ?`
)

func (t Tables) SetVersion(ctx context.Context, tx refset.Tx, component string, version int) error {
	if version == 0 {
		_, err := tx.ExecContext(ctx, t.rebind(forgetVersionSQL), component)
		return err
	}
	_, err := tx.ExecContext(ctx, t.rebind(setVersionSQL), component, version)
	return err
}

func (Tables) SetVersionScript(component string, version int) string {
	if version == 0 {
		return inline(forgetVersionSQL, literal(component))
	}
	return inline(setVersionSQL, literal(component), fmt.Sprint(version))
}

func (Tables) RecordedSets(ctx context.Context, q refset.Querier) ([]string, error) {
	return cleanupsql.Column[string](ctx, q, `SELECT component FROM refset_schema_version WHERE component LIKE 'set:%' ORDER BY component`)
}

func (t Tables) HasSetTable(ctx context.Context, q refset.Querier) (bool, error) {
	return t.exists(ctx, q, setTable)
}

const registerSQL = `INSERT INTO refset_sets (table_name, id_column, holds_table, queue_table) VALUES (?, ?, ?, ?)
	ON CONFLICT (table_name) DO UPDATE SET id_column = excluded.id_column,
		holds_table = excluded.holds_table, queue_table = excluded.queue_table`

func (t Tables) Register(ctx context.Context, tx refset.Tx, r refsetdriver.Registered) error {
	_, err := tx.ExecContext(ctx, t.rebind(registerSQL), r.Table.String(), r.IDColumn, r.Holds.String(), r.Queue.String())
	return err
}

func (Tables) RegisterScript(r refsetdriver.Registered) string {
	return inline(registerSQL, literal(r.Table.String()), literal(r.IDColumn), literal(r.Holds.String()), literal(r.Queue.String()))
}

func (t Tables) Lookup(ctx context.Context, q refset.Querier, table sqlident.Ident) (refsetdriver.Registered, error) {
	var idColumn, holds, queue string
	err := q.QueryRowContext(ctx, t.rebind(`SELECT id_column, holds_table, queue_table FROM refset_sets WHERE table_name = ?`),
		table.String()).Scan(&idColumn, &holds, &queue)
	if errors.Is(err, sql.ErrNoRows) {
		return refsetdriver.Registered{}, fmt.Errorf("refset/schema: no set on table %s (build its store first): %w", table, refset.ErrNotFound)
	}
	if err != nil {
		return refsetdriver.Registered{}, err
	}
	r := refsetdriver.Registered{Table: table, IDColumn: idColumn}
	if r.Holds, err = sqlident.Parse(holds, true); err != nil {
		return refsetdriver.Registered{}, err
	}
	if r.Queue, err = sqlident.Parse(queue, true); err != nil {
		return refsetdriver.Registered{}, err
	}
	return r, nil
}

const unregisterSQL = `DELETE FROM refset_sets WHERE table_name = ?`

func (t Tables) Unregister(ctx context.Context, tx refset.Tx, table sqlident.Ident) error {
	_, err := tx.ExecContext(ctx, t.rebind(unregisterSQL), table.String())
	return err
}

func (Tables) UnregisterScript(table sqlident.Ident) string {
	return inline(unregisterSQL, literal(table.String()))
}

func (Tables) SetTables(ctx context.Context, q refset.Querier) ([]string, error) {
	return cleanupsql.Column[string](ctx, q, `SELECT table_name FROM refset_sets ORDER BY table_name`)
}

// inline writes values, SQL literals, in place of the ? placeholders of query, in
// order. The statements here have no ? but their placeholders.
func inline(query string, values ...string) string {
	parts := strings.Split(query, "?")
	var b strings.Builder
	for i, p := range parts {
		b.WriteString(p)
		if i < len(values) {
			b.WriteString(values[i])
		}
	}
	return b.String()
}

// literal quotes s as a SQL string literal. The names refset writes are plain
// identifiers, so this is belt and braces.
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
