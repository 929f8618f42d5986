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
// followed by the record of its version, as Apply would have done it. Every
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
// that found its schema missing says which (PendingError). A nil q reads as an empty
// database (SQLText).
func Pending(ctx context.Context, q refset.Querier, d SQL, sets ...Set) (Plan, error) {
	core, err := Migrations(d, "core")
	if err != nil {
		return nil, err
	}
	var p Plan
	add := func(component string, ms []Migration, set *Set) error {
		from, err := recorded(ctx, q, d, component, set)
		if err != nil {
			return fmt.Errorf("refset/schema: reading the version of %s: %w", component, err)
		}
		s := Step{Component: component, From: from, To: from, set: set, sql: d}
		for _, m := range ms {
			if m.Version > from {
				s.Migrations = append(s.Migrations, m)
				s.To = m.Version
			}
		}
		if set != nil {
			ok, err := registered(ctx, q, d, *set)
			if err != nil {
				return fmt.Errorf("refset/schema: reading the registration of %s: %w", set.Table, err)
			}
			s.Register = !ok
		}
		if s.To != from || s.Register {
			p = append(p, s)
		}
		return nil
	}
	if err := add("core", core, nil); err != nil {
		return nil, err
	}
	for _, set := range sets {
		ms, err := setMigrations(d, set, false)
		if err == nil {
			err = add(setComponent(set.Table), ms, &set)
		}
		if err != nil {
			return nil, err
		}
	}
	return p, nil
}

// SQLText is the script that creates refset's core tables and each set's in an empty
// database: Pending's SQL when nothing is there yet. A DBA keeps it beside the
// database's other migrations.
func SQLText(d SQL, sets ...Set) (string, error) {
	p, err := Pending(context.Background(), nil, d, sets...)
	if err != nil {
		return "", err
	}
	return p.SQL(), nil
}

// recorded is the version of component, core (set nil) or set's, that q's database
// records: 0 when q is nil, when it records none, or when a table of the component is
// gone, since Apply then runs its migrations again.
func recorded(ctx context.Context, q refset.Querier, d SQL, component string, set *Set) (int, error) {
	if q == nil {
		return 0, nil
	}
	if has, err := d.HasVersionTable(ctx, q); err != nil || !has {
		return 0, err
	}
	if g, err := gone(ctx, q, d, set); err != nil || g {
		return 0, err
	}
	return d.Version(ctx, q, component)
}

// registered reports whether q's database (none when q is nil) registers set in
// refset_sets as it is described.
func registered(ctx context.Context, q refset.Querier, d SQL, set Set) (bool, error) {
	if q == nil {
		return false, nil
	}
	if has, err := d.HasSetTable(ctx, q); err != nil || !has {
		return false, err
	}
	r, err := d.Lookup(ctx, q, set.Table)
	if errors.Is(err, refset.ErrNotFound) {
		return false, nil
	}
	return err == nil && r.IDColumn == set.IDColumn && r.Holds == set.Holds && r.Queue == set.Queue, err
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
