package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/schema"
	"github.com/refsetdb/refset/sqlident"
)

// migration is what the migrate commands work on: the dialect's migrations and the
// sets they cover.
type migration struct {
	db   refset.Database
	d    refsetdriver.Driver
	sql  refsetdriver.SchemaSQL
	sets []schema.Set
}

// newMigration describes the sets named by tables, or, when none is named, every set
// refset_sets records. A named set that no store registered yet is described as its
// store would build it by default (holds table T_holds, queue T_review, the ID the
// table's one-column primary key), so that migrate can create its tables before the
// program first runs.
func newMigration(ctx context.Context, db refset.Database, tables []string) (migration, error) {
	d := db.Driver()
	m := migration{db: db, d: d, sql: d.SchemaSQL()}
	q := db.Reader()
	hasSets, err := m.sql.HasSetTable(ctx, q)
	if err != nil {
		return migration{}, db.TranslateError(err, "")
	}
	if len(tables) == 0 && hasSets {
		if tables, err = m.sql.SetTables(ctx, q); err != nil {
			return migration{}, db.TranslateError(err, "")
		}
	}
	for _, name := range tables {
		set, err := m.describe(ctx, name, hasSets)
		if err != nil {
			return migration{}, err
		}
		m.sets = append(m.sets, set)
	}
	return m, nil
}

// describe is the schema.Set of the set on table name: its registration if it has
// one, the store's defaults if not, and its ID column's type from the catalog.
func (m migration) describe(ctx context.Context, name string, hasSets bool) (schema.Set, error) {
	table, err := sqlident.Parse(name, true)
	if err != nil {
		return schema.Set{}, err
	}
	cols, err := m.d.Columns(ctx, m.db.Reader(), table)
	if err != nil {
		return schema.Set{}, fmt.Errorf("reading the columns of %s: %w", table, m.db.TranslateError(err, ""))
	}
	if len(cols) == 0 {
		return schema.Set{}, fmt.Errorf("%w: no table %s", refset.ErrNotFound, table)
	}
	set := schema.Set{Table: table}
	reg, err := refsetdriver.Registered{}, refset.ErrNotFound
	if hasSets {
		reg, err = m.sql.Lookup(ctx, m.db.Reader(), table)
	}
	switch {
	case err == nil:
		set.IDColumn, set.Holds, set.Queue = reg.IDColumn, reg.Holds, reg.Queue
	case errors.Is(err, refset.ErrNotFound):
		var keys []string
		for _, c := range cols {
			if c.Primary {
				keys = append(keys, c.Name)
			}
		}
		if len(keys) != 1 {
			return schema.Set{}, fmt.Errorf("%w: %s has no set registered and its primary key is %d columns, not one: build its store first",
				refset.ErrInvalidConfig, table, len(keys))
		}
		set.IDColumn = keys[0]
		if set.Holds, err = table.WithName(table.Name + "_holds"); err != nil {
			return schema.Set{}, err
		}
		if set.Queue, err = table.WithName(table.Name + "_review"); err != nil {
			return schema.Set{}, err
		}
	default:
		return schema.Set{}, m.db.TranslateError(err, "")
	}
	for _, c := range cols {
		if c.Name == set.IDColumn {
			set.IDType = c.Type
		}
	}
	if set.IDType == "" {
		return schema.Set{}, fmt.Errorf("%w: %s has no column %s, which refset_sets names as its ID", refset.ErrSchema, table, set.IDColumn)
	}
	return set, nil
}

// pending is the plan of what the database lacks.
func (m migration) pending(ctx context.Context) (schema.Plan, error) {
	p, err := schema.Pending(ctx, m.db.Reader(), m.sql, m.sets...)
	if err != nil && !refset.IsSentinel(err) {
		err = m.db.TranslateError(err, "")
	}
	return p, err
}

// componentJSON is one line of migrate status.
type componentJSON struct {
	Component string `json:"component"`
	Recorded  int    `json:"recorded"`  // in refset_schema_version; 0 when none
	Available int    `json:"available"` // the last migration this build of refset has
	Pending   bool   `json:"pending"`   // the plan has a step for it
	// Register says the set's registration in refset_sets is missing or differs.
	Register bool `json:"register"`
}

type migrateStatusJSON struct {
	Components []componentJSON `json:"components"`
	Pending    string          `json:"pending"` // the plan, as schema.Plan.String; "" when up to date
}

// onSets is the setup of a migrate command on the sets its repeatable --table names.
func onSets(run func(migration, context.Context, call) error) func(*flag.FlagSet) func(context.Context, call) error {
	return func(fs *flag.FlagSet) func(context.Context, call) error {
		var tables []string
		fs.Func("table", "a set's object table, repeatable (default: every set refset_sets records)", func(v string) error {
			tables = append(tables, v)
			return nil
		})
		return func(ctx context.Context, c call) error {
			named := make([]string, len(tables))
			for i, t := range tables {
				var err error
				if named[i], err = registeredTable(ctx, c.db, t); err != nil {
					return err
				}
			}
			m, err := newMigration(ctx, c.db, named)
			if err != nil {
				return err
			}
			return run(m, ctx, c)
		}
	}
}

// status prints the recorded, available and pending state of core and of each set.
func (m migration) status(ctx context.Context, c call) error {
	p, err := m.pending(ctx)
	if err != nil {
		return err
	}
	doc := migrateStatusJSON{Components: []componentJSON{}, Pending: p.String()}
	components := []string{"core"}
	for _, s := range m.sets {
		components = append(components, "set:"+s.Table.String())
	}
	hasVersions, err := m.sql.HasVersionTable(ctx, m.db.Reader())
	if err != nil {
		return m.db.TranslateError(err, "")
	}
	for _, name := range components {
		kind, _, _ := strings.Cut(name, ":")
		ms, err := schema.Migrations(m.sql, kind)
		if err != nil {
			return err
		}
		j := componentJSON{Component: name, Available: ms[len(ms)-1].Version}
		if hasVersions {
			if j.Recorded, err = m.sql.Version(ctx, m.db.Reader(), name); err != nil {
				return m.db.TranslateError(err, "")
			}
		}
		for _, s := range p {
			if s.Component == name {
				j.Pending, j.Register = true, s.Register
			}
		}
		doc.Components = append(doc.Components, j)
	}
	return c.print(doc)
}

func (doc migrateStatusJSON) text(out io.Writer) error {
	tw := newTable(out, "COMPONENT", "RECORDED", "AVAILABLE", "PENDING")
	for _, c := range doc.Components {
		pending := "-"
		switch {
		case c.Pending && c.Register && c.Recorded == c.Available:
			pending = "registration"
		case c.Pending:
			pending = "yes"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", c.Component, c.Recorded, c.Available, pending)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if doc.Pending == "" {
		_, err := fmt.Fprintln(out, "\nnothing pending")
		return err
	}
	_, err := fmt.Fprintf(out, "\npending: %s (refset migrate up applies it; refset migrate sql prints it)\n", doc.Pending)
	return err
}

// up applies what is pending and prints what it did.
func (m migration) up(ctx context.Context, c call) error {
	done, err := schema.Apply(ctx, c.db, m.sql, m.sets...)
	if err != nil {
		return err
	}
	if len(done) == 0 {
		fmt.Fprintln(c.out, "nothing to do: every component is up to date")
	}
	for _, a := range done {
		fmt.Fprintf(c.out, "applied %s\n", a)
	}
	return nil
}

// script prints what is pending as a script, changing nothing.
func (m migration) script(ctx context.Context, c call) error {
	p, err := m.pending(ctx)
	if err != nil {
		return err
	}
	if len(p) == 0 {
		// A comment, so that the output is still a script a tool may run.
		_, err = fmt.Fprintln(c.out, "-- refset schema: nothing pending.")
		return err
	}
	_, err = io.WriteString(c.out, p.SQL())
	return err
}

func migrateDownCommand(fs *flag.FlagSet) func(context.Context, call) error {
	component := fs.String("component", "", `the component to take down: "core" or "set:<table>" (required)`)
	target := fs.Int("target", -1, "the version to take it down to; 0 removes its tables and their rows (required)")
	return func(ctx context.Context, c call) error {
		if *component == "" || *target < 0 {
			return fmt.Errorf("%w: --component and --target (0 or more) are required", refset.ErrInvalidConfig)
		}
		a, err := schema.MigrateDown(ctx, c.db, c.db.Driver().SchemaSQL(), *component, *target)
		if err != nil {
			return err
		}
		if a.From == a.To {
			fmt.Fprintf(c.out, "nothing to do: %s is at version %d\n", a.Component, a.To)
			return nil
		}
		fmt.Fprintf(c.out, "applied %s\n", a)
		return nil
	}
}
