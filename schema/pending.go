package schema

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/refsetdb/refset/refset"
)

// Step is one component's work not yet done in a database: its migrations after
// version From, up to To, and for a set its registration in refset_sets.
type Step struct {
	Component  string
	From, To   int
	Migrations []Migration // rendered; empty when only the registration is missing
	// Register says the set is not (or not so) recorded in refset_sets.
	Register bool

	set *Set // the set of a set's step
	sql SQL  // the dialect the script is written in
}

// Plan is what a database lacks for the sets given to Pending, core first. An empty
// Plan: nothing to do.
type Plan []Step

// String names each step, as "core 0 -> 1, set:items 0 -> 2".
func (p Plan) String() string {
	var parts []string
	for _, s := range p {
		part := fmt.Sprintf("%s %d -> %d", s.Component, s.From, s.To)
		if s.Register && s.From == s.To {
			part = s.Component + " registration"
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, ", ")
}

// SQL is the script that does the plan, for a DBA to read and run in one
// transaction with a role that may create tables: the migrations in order, each
// followed by the record of its version, as Migrate would have done it. Every
// statement creates only what is missing, so running it twice does no harm. An empty
// Plan gives "".
func (p Plan) SQL() string {
	if len(p) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "-- refset schema: %s. Run in one transaction.\n", p)
	b.WriteString(p[0].sql.VersionTable() + ";\n")
	for _, s := range p {
		for _, m := range s.Migrations {
			fmt.Fprintf(&b, "\n-- %s %s\n%s\n", s.Component, m.Name, statement(m.SQL))
		}
		if s.To != s.From {
			b.WriteString(s.sql.SetVersionScript(s.Component, s.To) + ";\n")
		}
		if s.Register {
			b.WriteString(s.sql.RegisterScript(s.set.registered()) + ";\n")
		}
	}
	return b.String()
}

// statement ends a migration's text with a semicolon, so the next one starts a new
// statement.
func statement(text string) string {
	text = strings.TrimSpace(text)
	if !strings.HasSuffix(text, ";") {
		text += ";"
	}
	return text
}

// Pending reads, without changing anything, what q's database lacks of refset's core
// tables and of each set's: the migrations Apply would run. Its Plan's SQL is the
// script a DBA runs where the application's role may not create tables (the stores'
// ExternalMigrations option). Sets are described as the stores build them; a store
// that found its schema missing says which (PendingError).
func Pending(ctx context.Context, q refset.Querier, d SQL, sets ...Set) (Plan, error) {
	return plan(d, sets, func(component string, set *Set) (int, error) {
		if has, err := d.HasVersionTable(ctx, q); err != nil || !has {
			return 0, err
		}
		if g, err := gone(ctx, q, d, set); err != nil || g {
			return 0, err
		}
		return d.Version(ctx, q, component)
	}, func(set Set) (bool, error) {
		if has, err := d.HasSetTable(ctx, q); err != nil || !has {
			return false, err
		}
		r, err := d.Lookup(ctx, q, set.Table)
		if errors.Is(err, refset.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return r.IDColumn == set.IDColumn && r.Holds == set.Holds && r.Queue == set.Queue, nil
	})
}

// SQLText is the script that creates refset's core tables and each set's in an empty
// database: Pending's SQL when nothing is there yet. A DBA keeps it beside the
// database's other migrations.
func SQLText(d SQL, sets ...Set) (string, error) {
	p, err := plan(d, sets,
		func(string, *Set) (int, error) { return 0, nil },
		func(Set) (bool, error) { return false, nil })
	if err != nil {
		return "", err
	}
	return p.SQL(), nil
}

// plan lists the steps missing given how a component's version (have) and a set's
// registration (registered) read.
func plan(d SQL, sets []Set,
	have func(component string, set *Set) (int, error),
	registered func(Set) (bool, error),
) (Plan, error) {
	var p Plan
	core, err := Migrations(d, "core")
	if err != nil {
		return nil, err
	}
	step, err := pendingStep("core", core, nil, have)
	if err != nil {
		return nil, err
	}
	if step != nil {
		step.sql = d
		p = append(p, *step)
	}
	for _, set := range sets {
		ms, err := setMigrations(d, set, false)
		if err != nil {
			return nil, err
		}
		step, err := pendingStep(setComponent(set.Table), ms, &set, have)
		if err != nil {
			return nil, err
		}
		ok, err := registered(set)
		if err != nil {
			return nil, fmt.Errorf("refset/schema: reading the registration of %s: %w", set.Table, err)
		}
		if step == nil && !ok {
			last := ms[len(ms)-1].Version
			step = &Step{Component: setComponent(set.Table), From: last, To: last}
		}
		if step != nil {
			step.Register, step.set, step.sql = !ok, &set, d
			p = append(p, *step)
		}
	}
	return p, nil
}

// pendingStep is the step of component whose migrations are ms, nil if none is due.
func pendingStep(component string, ms []Migration, set *Set,
	have func(string, *Set) (int, error),
) (*Step, error) {
	from, err := have(component, set)
	if err != nil {
		return nil, fmt.Errorf("refset/schema: reading the version of %s: %w", component, err)
	}
	s := &Step{Component: component, From: from, To: from}
	for _, m := range ms {
		if m.Version > from {
			s.Migrations = append(s.Migrations, m)
			s.To = m.Version
		}
	}
	if s.To == from {
		return nil, nil
	}
	return s, nil
}

// PendingError says a database lacks schema a store needs, where the store may not
// create it itself (ExternalMigrations). It matches refset.ErrSchema; its Plan says
// what is missing and its Plan.SQL() is the script to run.
type PendingError struct {
	Plan Plan
}

func (e *PendingError) Error() string {
	return fmt.Sprintf("refset/schema: %v: the database lacks %s (with ExternalMigrations the application runs no DDL: "+
		"have a DBA run the script of schema.Pending(ctx, db, <store>.SchemaSQL(), set).SQL(), or of this error's Plan.SQL() "+
		"through errors.As with *schema.PendingError)", refset.ErrSchema, e.Plan)
}

// Is matches refset.ErrSchema.
func (e *PendingError) Is(target error) bool { return target == refset.ErrSchema }

// Check fails with a *PendingError (refset.ErrSchema) when q's database lacks any of
// refset's core tables or the sets' tables at the versions this code needs, and
// changes nothing. It is what a store does instead of Apply when it may run no DDL.
func Check(ctx context.Context, q refset.Querier, d SQL, sets ...Set) error {
	p, err := Pending(ctx, q, d, sets...)
	if err != nil {
		return err
	}
	if len(p) > 0 {
		return &PendingError{Plan: p}
	}
	return nil
}
