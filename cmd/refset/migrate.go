package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	files "github.com/refsetdb/refset/internal/migration"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/schema"
)

// migration is what the migrate commands work on: refset's migrator on the sets
// they cover.
type migration struct {
	db       refset.Database
	sql      refsetdriver.SchemaSQL
	sets     []string // the sets' object tables
	migrator *schema.Migrator
}

// newMigration covers the sets named by tables, or, when none is named, every set
// refset_sets records. The migrator describes each as its registration says, or, for
// a set no store registered yet, as its store would build it by default (holds table
// T_holds, queue T_review, the ID the table's one-column primary key), so that
// migrate can create its tables before the program first runs.
func newMigration(ctx context.Context, db refset.Database, tables []string) (migration, error) {
	m := migration{db: db, sql: db.Driver().SchemaSQL()}
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
	var cfg schema.Config
	for _, t := range tables {
		cfg.Sets = append(cfg.Sets, schema.Set{Table: t})
	}
	if m.migrator, err = schema.New(db, cfg); err != nil {
		return migration{}, err
	}
	m.sets = tables
	return m, nil
}

// pending is the plan of what the database lacks: a dry run.
func (m migration) pending(ctx context.Context) (*schema.MigrateResult, error) {
	return m.migrator.Migrate(ctx, schema.DirectionUp, &schema.MigrateOpts{DryRun: true})
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
	Pending    string          `json:"pending"` // the plan, as schema.MigrateResult.String; "" when up to date
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
	for _, table := range m.sets {
		components = append(components, "set:"+table)
	}
	hasVersions, err := m.sql.HasVersionTable(ctx, m.db.Reader())
	if err != nil {
		return m.db.TranslateError(err, "")
	}
	for _, name := range components {
		kind, _, _ := strings.Cut(name, ":")
		ms, err := files.Dialect(m.sql, kind, false)
		if err != nil {
			return err
		}
		j := componentJSON{Component: name, Available: ms[len(ms)-1].Version}
		if hasVersions {
			if j.Recorded, err = m.sql.Version(ctx, m.db.Reader(), name); err != nil {
				return m.db.TranslateError(err, "")
			}
		}
		for _, s := range p.Steps {
			if s.Component == name {
				j.Pending, j.Register = true, s.Registration
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
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", printable(c.Component), c.Recorded, c.Available, pending)
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
	done, err := m.migrator.Migrate(ctx, schema.DirectionUp, nil)
	if err != nil {
		return err
	}
	if len(done.Steps) == 0 {
		fmt.Fprintln(c.out, "nothing to do: every component is up to date")
	}
	for _, s := range done.Steps {
		fmt.Fprintf(c.out, "applied %s\n", s)
	}
	return nil
}

// script prints what is pending as a script, changing nothing.
func (m migration) script(ctx context.Context, c call) error {
	p, err := m.pending(ctx)
	if err != nil {
		return err
	}
	if len(p.Steps) == 0 {
		// A comment, so that the output is still a script a tool may run.
		_, err = fmt.Fprintln(c.out, "-- refset schema: nothing pending.")
		return err
	}
	_, err = io.WriteString(c.out, p.SQL())
	return err
}

// migrateDownCheck refuses, before the database is opened, a migrate down without
// --component or without a --target of 0 or more (refset.ErrInvalidConfig).
func migrateDownCheck(fs *flag.FlagSet) error {
	target, _ := fs.Lookup("target").Value.(flag.Getter).Get().(int)
	if fs.Lookup("component").Value.String() == "" || target < 0 {
		return errMigrateDown
	}
	return nil
}

var errMigrateDown = fmt.Errorf("%w: --component and --target (0 or more) are required", refset.ErrInvalidConfig)

func migrateDownCommand(fs *flag.FlagSet) func(context.Context, call) error {
	component := fs.String("component", "", `the component to take down: "core" or "set:<table>" (required)`)
	target := fs.Int("target", -1, "the version to take it down to; 0 removes its tables and their rows (required)")
	return func(ctx context.Context, c call) error {
		if *component == "" || *target < 0 {
			return errMigrateDown
		}
		m, err := newMigration(ctx, c.db, nil)
		if err != nil {
			return err
		}
		opts := schema.MigrateOpts{Component: *component, TargetVersion: *target}
		if *target == 0 {
			opts.TargetVersion = -1 // the migrator's 0 is "one step"
		}
		done, err := m.migrator.Migrate(ctx, schema.DirectionDown, &opts)
		if err != nil {
			return err
		}
		if len(done.Steps) == 0 {
			fmt.Fprintf(c.out, "nothing to do: %s is at version %d\n", *component, *target)
			return nil
		}
		fmt.Fprintf(c.out, "applied %s\n", done.Steps[0])
		return nil
	}
}
