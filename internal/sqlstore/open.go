package sqlstore

import (
	"context"
	"errors"
	"fmt"

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
	HoldsTable string // "" means Table + "_holds", in the same schema
}

// Open checks cfg and the struct T against the catalog, creates the set's holds table
// if needed (schema.Apply), and returns the store. With d.ExternalMigrations it
// creates nothing and fails with refset.ErrSchema (a *schema.PendingError, which
// carries the SQL to run) if the schema is not at the versions this code needs.
func Open[T refset.Identifiable[ID], ID comparable](ctx context.Context, db refset.Database, cfg Config) (*Store[T, ID], error) {
	d, err := refsetdriver.Of(db)
	if err != nil {
		return nil, err
	}
	table, holds, queue, err := cfg.tables()
	if err != nil {
		return nil, err
	}
	cols, err := d.Columns(ctx, db.Reader(), table)
	if err != nil {
		return nil, sentinel.Wrap("refset", fmt.Sprintf("reading the columns of %s", table), db.TranslateError(err, ""))
	}
	t, err := Resolve[T, ID](table, cfg.IDColumn, cols)
	if err != nil {
		return nil, err
	}
	t.Holds = holds
	set := schema.Set{Table: table, IDColumn: t.IDColumn, IDType: t.IDType, Holds: holds, Queue: queue}
	if d.ExternalMigrations() {
		if err := schema.Check(ctx, db.Reader(), d.SchemaSQL(), set); err != nil {
			return nil, sentinel.Wrap("refset", fmt.Sprintf("checking the schema of %s", table), db.TranslateError(err, ""))
		}
	} else if _, err := schema.Apply(ctx, db, d.SchemaSQL(), set); err != nil {
		return nil, sentinel.Wrap("refset", fmt.Sprintf("creating the holds table of %s", table), err)
	}
	return New[T, ID](db, t, d.Statements(t.SetTable())), nil
}

// tables are the set's object table, its holds table and its review queue.
func (cfg Config) tables() (table, holds, queue sqlident.Ident, err error) {
	if table, err = sqlident.Parse(cfg.Table, true); err != nil {
		return
	}
	holdsName := cfg.HoldsTable
	if holdsName == "" {
		holdsName = table.Name + "_holds"
	}
	if holds, err = table.WithName(holdsName); err != nil {
		return table, holds, queue, fmt.Errorf("%w (name the holds table with HoldsTable)", err)
	}
	if queue, err = table.WithName(table.Name + "_review"); err != nil {
		return table, holds, queue, fmt.Errorf("%w (the review queue is named after the table; use a shorter name)", err)
	}
	return table, holds, queue, nil
}

// Translated reports whether err already carries a refset sentinel or the context's
// error, so a store does not translate (and prefix) it twice: translating is then
// the same whether it is done once or again by each layer an error passes.
func Translated(err error) bool {
	return refset.IsSentinel(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
