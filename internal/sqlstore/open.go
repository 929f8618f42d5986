package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/refsetdb/refset/internal/migration"
	"github.com/refsetdb/refset/internal/sentinel"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/schema"
	"github.com/refsetdb/refset/sqlident"
)

// Config names a set's table. The store packages document it to users.
type Config struct {
	Table      string // the object table, optionally schema-qualified (Postgres)
	IDColumn   string // "" means the table's primary key
	HoldsTable string // "" means Table + "_holds", in the same schema (store.NewStore puts the recorded one here)
}

// Open checks cfg and the struct T against the catalog (the ID type against the ID
// column's SQL type too, SchemaSQL.CheckIDType), creates the set's holds table
// and review queue if needed (package schema's migrator, as a program would run it),
// and returns the store. With d.ExternalMigrations it creates nothing and fails with
// refset.ErrSchema (a *schema.PendingError, which carries the SQL to run) if the schema
// is not at the versions this code needs.
func Open[T refset.Identifiable[ID], ID comparable](ctx context.Context, db refset.Database, cfg Config) (*Store[T, ID], error) {
	d, err := refsetdriver.Of(db)
	if err != nil {
		return nil, err
	}
	if err := refsetdriver.RefuseUnit(ctx, db, "NewStore"); err != nil {
		return nil, fmt.Errorf("refset: new store of %s: %w", cfg.Table, err)
	}
	table, holds, _, err := migration.SetTables(cfg.Table, cfg.HoldsTable)
	if err != nil {
		return nil, err
	}
	cols, err := d.Columns(ctx, refsetdriver.ReaderFor(ctx, db), table)
	if err != nil {
		return nil, sentinel.Wrap("refset", fmt.Sprintf("reading the columns of %s", table), db.TranslateError(err, ""))
	}
	t, err := Resolve[T, ID](table, cfg.IDColumn, cols)
	if err != nil {
		return nil, err
	}
	if err := d.SchemaSQL().CheckIDType(table, t.IDColumn, t.IDKeyType, reflect.TypeFor[ID]()); err != nil {
		return nil, err
	}
	if c, ok := d.SchemaSQL().(idChecker); ok {
		t.CheckID = c.IDCheck(table, t.IDColumn, t.IDKeyType, reflect.TypeFor[ID]())
	}
	t.Holds = holds
	m, err := schema.New(db, schema.Config{Sets: []schema.Set{{Table: table.String(), IDColumn: t.IDColumn, HoldsTable: holds.Name}}})
	if err != nil {
		return nil, err
	}
	if d.ExternalMigrations() {
		if err := m.Validate(ctx); err != nil {
			return nil, sentinel.Wrap("refset", fmt.Sprintf("checking the schema of %s", table), db.TranslateError(err, ""))
		}
	} else if _, err := m.Migrate(ctx, schema.DirectionUp, nil); err != nil {
		return nil, sentinel.Wrap("refset", fmt.Sprintf("creating the holds table of %s", table), err)
	}
	return New[T, ID](db, t, d.Statements(t.SetTable())), nil
}

// idChecker is a dialect's SchemaSQL that checks the IDs a set's store sends to its
// ID column (store/internal/storesql's Schema): IDCheck is the check of each ID of
// type id, for the column named column of SQL type typ, or nil when every ID is kept
// as written (see Table.CheckID).
type idChecker interface {
	IDCheck(table sqlident.Ident, column, typ string, id reflect.Type) func(id any) error
}

// Translated reports whether err already carries a refset sentinel or the context's
// error, so a store does not translate (and prefix) it twice: translating is then
// the same whether it is done once or again by each layer an error passes.
func Translated(err error) bool {
	return refset.IsSentinel(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
