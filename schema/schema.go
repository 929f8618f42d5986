package schema

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"
)

// SQL is a dialect's own part of refset's schema, refsetdriver.SchemaSQL: its
// migration files and every statement on refset's own tables. A program gets it from
// its store (sqlite.SchemaSQL(), postgres.SchemaSQL()) or from its database's driver,
// and never implements it.
type SQL = refsetdriver.SchemaSQL

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
// order. Set migrations are templates, rendered by Apply.
func Migrations(s SQL, kind string) ([]Migration, error) { return dialectFiles(s, kind, false) }

// dialectFiles lists a dialect's up (down false) or down migrations of one kind, in
// version order.
func dialectFiles(s SQL, kind string, down bool) ([]Migration, error) {
	sub, err := fs.Sub(s.Migrations(), kind)
	if err != nil {
		return nil, err
	}
	ms, err := readFiles(sub, down)
	if err != nil {
		if down {
			kind += " down"
		}
		return nil, fmt.Errorf("refset/schema: %s migrations for dialect %q: %w", kind, s.Name(), err)
	}
	return ms, nil
}

// downSuffix ends the name of a down migration, NNNN_name.down.sql, which undoes the
// up migration NNNN of the same folder.
const downSuffix = ".down.sql"

// readFiles reads the up migrations (down false), the files NNNN_name.sql at the root
// of fsys, at least one, or the down ones beside them, NNNN_name.down.sql, in version
// order.
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
	if len(ms) == 0 && !down {
		return nil, errors.New("no migrations")
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	return ms, nil
}

// Applied is what a migration did to one component (core, set:<table>, or a
// component of ApplyFS): its recorded version went from From to To. From is 0 when
// the component was new, or when its tables were gone and its migrations ran again.
// To is below From for MigrateDown.
type Applied struct {
	Component string
	From, To  int
}

func (a Applied) String() string { return fmt.Sprintf("%s %d -> %d", a.Component, a.From, a.To) }

// ApplyFS applies another component's migrations, the files NNNN_name.sql at the
// root of fsys (written for the dialect of d), after refset's core ones, recording
// their versions under component. Packages built on refset (blockmanager) keep their
// tables this way. It is idempotent and safe to run from several processes at once,
// and reports what it did: one Applied for each component (core, then component)
// whose version changed, none when all was up to date.
func ApplyFS(ctx context.Context, db refset.Database, d SQL, component string, fsys fs.FS) ([]Applied, error) {
	ms, err := readFiles(fsys, false)
	if err != nil {
		return nil, fmt.Errorf("refset/schema: %s: %w", component, err)
	}
	return applyAfterCore(ctx, db, d, func(tx refset.Tx, done *[]Applied) error {
		return apply(ctx, tx, d, component, ms, done)
	})
}

// Apply brings refset's core tables and the tables of each set (its holds table and
// review queue) up to date in one transaction, and registers each set in refset_sets,
// where tools find its tables. With no set it migrates the core alone. It is
// idempotent and safe to run from several processes at once, and reports what it did:
// one Applied for each component whose version changed, core first, none when all was
// up to date. A program that migrates at start-up can log it; an empty report on a
// database that should have needed work says another process got there first.
func Apply(ctx context.Context, db refset.Database, d SQL, sets ...Set) ([]Applied, error) {
	rendered := make([][]Migration, len(sets))
	for i, set := range sets {
		ms, err := setMigrations(d, set, false)
		if err != nil {
			return nil, err
		}
		rendered[i] = ms
	}
	return applyAfterCore(ctx, db, d, func(tx refset.Tx, done *[]Applied) error {
		for i, set := range sets {
			component := setComponent(set.Table)
			if err := forgetIfGone(ctx, tx, d, component, &set); err != nil {
				return err
			}
			if err := apply(ctx, tx, d, component, rendered[i], done); err != nil {
				return err
			}
			if err := d.Register(ctx, tx, set.registered()); err != nil {
				return err
			}
		}
		return nil
	})
}

// applyAfterCore brings the core up to date, then runs then, in one transaction, and
// returns what both applied.
func applyAfterCore(ctx context.Context, db refset.Database, d SQL, then func(refset.Tx, *[]Applied) error) ([]Applied, error) {
	core, err := Migrations(d, "core")
	if err != nil {
		return nil, err
	}
	if err := refsetdriver.RefuseUnit(ctx, db, "a migration"); err != nil {
		return nil, fmt.Errorf("refset/schema: %w", err)
	}
	var done []Applied
	err = refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
		done = done[:0] // a retried transaction starts over
		// Held to the end of the transaction: a second process waits here, then finds
		// everything applied.
		if err := d.LockMigrations(ctx, tx); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, d.VersionTable()); err != nil {
			return err
		}
		if err := forgetIfGone(ctx, tx, d, "core", nil); err != nil {
			return err
		}
		if err := apply(ctx, tx, d, "core", core, &done); err != nil {
			return err
		}
		return then(tx, &done)
	})
	if err != nil {
		return nil, err
	}
	return done, nil
}

// registered is set's registration, where tools (clean-up, the operators' command)
// find its tables.
func (set Set) registered() refsetdriver.Registered {
	return refsetdriver.Registered{Table: set.Table, IDColumn: set.IDColumn, Holds: set.Holds, Queue: set.Queue}
}

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
	ms, err := dialectFiles(d, "set", down)
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

// forgetIfGone forgets the versions recorded for component, core (set nil) or set's,
// when any of the tables its migrations create is missing, so that apply runs them
// all again. The record and the tables part ways when tables are dropped without
// refset: a test resets its fixtures, an operator drops a Postgres schema with
// CASCADE while refset's bookkeeping lives in another one. Running the migrations
// again is safe because every one of them creates only what does not exist (IF NOT
// EXISTS), which is why they must stay written that way.
func forgetIfGone(ctx context.Context, tx refset.Tx, d SQL, component string, set *Set) error {
	g, err := gone(ctx, tx, d, set)
	if err != nil || !g {
		return err
	}
	return d.SetVersion(ctx, tx, component, 0)
}

// gone reports whether any table the migrations of core (set nil) or of set create
// is missing. For core it is the registry of sets.
func gone(ctx context.Context, q refset.Querier, d SQL, set *Set) (bool, error) {
	if set == nil {
		has, err := d.HasSetTable(ctx, q)
		if err != nil {
			return false, fmt.Errorf("refset/schema: looking for the registry of sets: %w", err)
		}
		return !has, nil
	}
	for _, table := range []sqlident.Ident{set.Holds, set.Queue} {
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

// apply runs the migrations of component newer than its recorded version, and adds
// to done what changed.
func apply(ctx context.Context, tx refset.Tx, d SQL, component string, ms []Migration, done *[]Applied) error {
	from, err := d.Version(ctx, tx, component)
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
	return d.SetVersion(ctx, tx, component, current)
}
