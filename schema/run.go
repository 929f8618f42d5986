package schema

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"text/template"
	"time"

	"github.com/refsetdb/refset/internal/migration"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"
)

// The runs below read through q and, when tx is not nil, write through tx (q is then
// tx): a dry run is the same walk with nothing written, so what it lists is what a
// migration would run.

// up migrates every unit up, or with o.Component core and that one.
func (m *Migrator) up(ctx context.Context, q refset.Querier, tx refset.Tx, o MigrateOpts) (*MigrateResult, error) {
	res := &MigrateResult{Direction: DirectionUp, DryRun: tx == nil, sql: m.sql}
	hasVersions, err := m.sql.HasVersionTable(ctx, q)
	if err != nil {
		return nil, err
	}
	for _, u := range m.units {
		var limit MigrateOpts
		switch {
		case u.component == o.Component:
			limit = o
		case o.Component != "" && u.kind != kindCore:
			continue
		}
		step, err := m.upUnit(ctx, q, tx, u, hasVersions, limit)
		if err != nil {
			return nil, err
		}
		if step != nil {
			res.Steps = append(res.Steps, *step)
		}
	}
	return res, nil
}

// upUnit migrates u up, to limit's TargetVersion and by at most its MaxSteps when
// set, and returns what changed, nil if nothing.
func (m *Migrator) upUnit(ctx context.Context, q refset.Querier, tx refset.Tx, u unit, hasVersions bool, limit MigrateOpts) (*Step, error) {
	ms := u.up
	var set *resolvedSet
	if u.kind == kindSet {
		rs, err := m.resolve(ctx, q, u.set)
		if err != nil {
			return nil, err
		}
		if ms, err = rs.migrations(m.sql, false); err != nil {
			return nil, err
		}
		set = &rs
	}
	from := 0
	if hasVersions {
		gone, err := m.gone(ctx, q, u)
		if err != nil {
			return nil, err
		}
		if !gone {
			if from, err = m.sql.Version(ctx, q, u.component); err != nil {
				return nil, err
			}
		}
	}
	target := ms[len(ms)-1].Version
	if limit.TargetVersion > target {
		return nil, fmt.Errorf("refset/schema: %w: %s has no version %d (its latest is %d)",
			refset.ErrInvalidConfig, u.component, limit.TargetVersion, target)
	} else if limit.TargetVersion > 0 {
		target = limit.TargetVersion
	}
	step := Step{Component: u.component, From: from, To: from}
	for _, mig := range ms {
		if mig.Version <= from || mig.Version > target {
			continue
		}
		if limit.MaxSteps > 0 && len(step.Versions) == limit.MaxSteps {
			break
		}
		v, err := m.run(ctx, tx, u.component, mig)
		if err != nil {
			return nil, err
		}
		step.Versions = append(step.Versions, v)
		step.To = mig.Version
	}
	if tx != nil && step.To != from {
		if err := m.sql.SetVersion(ctx, tx, u.component, step.To); err != nil {
			return nil, err
		}
	}
	if set != nil {
		reg := set.Registered
		ok, err := m.registered(ctx, q, reg)
		if err != nil {
			return nil, fmt.Errorf("refset/schema: reading the registration of %s: %w", reg.Table, err)
		}
		if !ok {
			step.Registration, step.reg = true, &reg
			if tx != nil {
				if err := m.sql.Register(ctx, tx, reg); err != nil {
					return nil, err
				}
			}
		}
	}
	if step.To == from && !step.Registration {
		return nil, nil
	}
	return &step, nil
}

// run runs one migration of component in tx, timed, or in a dry run (tx nil) only
// lists it.
func (m *Migrator) run(ctx context.Context, tx refset.Tx, component string, mig migration.Migration) (MigrateVersion, error) {
	v := MigrateVersion{Version: mig.Version, Name: mig.Name, SQL: mig.SQL}
	if tx == nil {
		return v, nil
	}
	start := time.Now()
	if _, err := tx.ExecContext(ctx, mig.SQL); err != nil {
		return v, fmt.Errorf("refset/schema: %s %s: %w", component, mig.Name, err)
	}
	v.Duration = time.Since(start)
	return v, nil
}

// gone reports whether a table that u's migrations create is missing, so that its
// recorded version stands for tables that are not there and its migrations must run
// again. The record and the tables part ways when tables are dropped without refset:
// a test resets its fixtures, an operator drops a PostgreSQL schema with CASCADE
// while refset's record lives in another one. Running refset's migrations again is
// safe because each creates only what does not exist (IF NOT EXISTS), which is why
// they must stay written that way. For core the table is the registry of sets; a
// Component's tables are its own, and not checked.
func (m *Migrator) gone(ctx context.Context, q refset.Querier, u unit) (bool, error) {
	switch u.kind {
	case kindCore:
		has, err := m.sql.HasSetTable(ctx, q)
		if err != nil {
			return false, fmt.Errorf("refset/schema: looking for the registry of sets: %w", err)
		}
		return !has, nil
	case kindSet:
		for _, table := range []sqlident.Ident{u.set.holds, u.set.queue} {
			found, err := m.sql.TableExists(ctx, q, table)
			if err != nil {
				return false, fmt.Errorf("refset/schema: looking for %s: %w", table, err)
			}
			if !found {
				return true, nil
			}
		}
	}
	return false, nil
}

// down takes u down as o says. It undoes u's migrations from its version down, in
// turn, each with its down file: the versions its up files have, which need not be
// every number (a version a program dropped leaves a gap), so MaxSteps counts
// migrations, as up.
func (m *Migrator) down(ctx context.Context, q refset.Querier, tx refset.Tx, u *unit, o MigrateOpts) (*MigrateResult, error) {
	res := &MigrateResult{Direction: DirectionDown, DryRun: tx == nil, sql: m.sql}
	current := 0
	if has, err := m.sql.HasVersionTable(ctx, q); err != nil {
		return nil, err
	} else if has {
		if current, err = m.sql.Version(ctx, q, u.component); err != nil {
			return nil, err
		}
	}
	floor := 0 // TargetVersion -1, or a number of steps
	if o.TargetVersion > 0 {
		floor = o.TargetVersion
	}
	if floor > current {
		return nil, fmt.Errorf("refset/schema: %w: %s is at version %d, below target %d (a down migration only goes down; DirectionUp goes up)",
			refset.ErrInvalidConfig, u.component, current, floor)
	}
	if floor == current {
		return res, nil
	}
	known, err := m.upVersions(u)
	if err != nil {
		return nil, err
	}
	if latest := known[len(known)-1]; current > latest {
		return nil, fmt.Errorf("refset/schema: %s is at version %d, which this program does not know (its latest is %d): "+
			"a newer one migrated it, and only that one has the down migrations to undo it: %w",
			u.component, current, latest, refset.ErrSchema)
	}
	// The versions to undo, from the highest: those at or below current and above
	// floor, one by default, MaxSteps of them with it, all of them with a target.
	var undo []int
	for i := len(known) - 1; i >= 0 && known[i] > floor; i-- {
		if known[i] <= current {
			undo = append(undo, known[i])
		}
	}
	if steps := max(o.MaxSteps, 1); (o.MaxSteps > 0 || o.TargetVersion == 0) && len(undo) > steps {
		undo = undo[:steps]
	}
	if len(undo) == 0 {
		return res, nil // a version between two of its migrations, above floor: nothing to undo
	}
	// Recorded afterwards: the version below the last one undone, or floor, which a
	// target names.
	target := floor
	for _, v := range known {
		if v < undo[len(undo)-1] {
			target = max(target, v)
		}
	}
	downs, err := m.downFiles(ctx, q, u, target)
	if err != nil {
		return nil, err
	}
	byVersion := map[int]migration.Migration{}
	for _, d := range downs {
		byVersion[d.Version] = d
	}
	// Every file found before any runs: a missing one refuses the whole step.
	var run []migration.Migration
	for _, v := range undo {
		d, ok := byVersion[v]
		if !ok {
			return nil, fmt.Errorf("refset/schema: %w: %s has no down migration for version %d (NNNN_name%s)",
				refset.ErrInvalidConfig, u.component, v, migration.DownSuffix)
		}
		run = append(run, d)
	}
	step := Step{Component: u.component, From: current, To: target, Registration: u.kind == kindSet && target == 0}
	if step.Registration {
		step.reg = &refsetdriver.Registered{Table: u.set.table}
	}
	for _, d := range run {
		v, err := m.run(ctx, tx, u.component, d)
		if err != nil {
			return nil, err
		}
		step.Versions = append(step.Versions, v)
	}
	if tx != nil {
		if err := m.sql.SetVersion(ctx, tx, u.component, target); err != nil {
			return nil, err
		}
		if step.Registration {
			if err := m.sql.Unregister(ctx, tx, u.set.table); err != nil {
				return nil, err
			}
		}
	}
	res.Steps = append(res.Steps, step)
	return res, nil
}

// upVersions are the versions of u's up migrations, in order.
func (m *Migrator) upVersions(u *unit) ([]int, error) {
	ms := u.up
	if u.kind == kindSet {
		var err error
		if ms, err = migration.Dialect(m.sql, "set", false); err != nil {
			return nil, err
		}
	}
	vs := make([]int, len(ms))
	for i, mig := range ms {
		vs[i] = mig.Version
	}
	return vs, nil
}

// downFiles are the down migrations of u, which goes down to target.
func (m *Migrator) downFiles(ctx context.Context, q refset.Querier, u *unit, target int) ([]migration.Migration, error) {
	switch u.kind {
	case kindCore:
		if target == 0 {
			sets, err := m.sql.RecordedSets(ctx, q)
			if err != nil {
				return nil, err
			}
			if len(sets) > 0 {
				return nil, fmt.Errorf("refset/schema: cannot take core to 0: refset_schema_version still records %s (take them to 0 first): %w",
					strings.Join(sets, ", "), refset.ErrReferenced)
			}
		}
		return migration.Dialect(m.sql, "core", true)
	case kindSet:
		// As the set was registered: its tables are the ones to drop.
		r, err := m.sql.Lookup(ctx, q, u.set.table)
		if err != nil {
			return nil, err
		}
		rs := resolvedSet{Registered: r}
		return rs.migrations(m.sql, true)
	}
	return u.down, nil // read and checked by New
}

// resolvedSet is a set as its migrations are written for it.
type resolvedSet struct {
	refsetdriver.Registered
	IDType string // the ID column's type, as the catalog writes it; "" down
}

// resolve reads from the catalog (and from the registry, for what s leaves out)
// what the migrations of s are written for. A HoldsTable other than the one the
// registry records for the set is refused (refset.ErrInvalidConfig): migrating would
// repoint the set's record to the new table, and leave the holds in the recorded one
// to nobody (the set could no longer release them, nor clean-up expire them).
func (m *Migrator) resolve(ctx context.Context, q refset.Querier, s setSpec) (resolvedSet, error) {
	rs := resolvedSet{Registered: refsetdriver.Registered{Table: s.table, IDColumn: s.idColumn, Holds: s.holds, Queue: s.queue}}
	if has, err := m.sql.HasSetTable(ctx, q); err != nil {
		return rs, err
	} else if has {
		r, err := m.sql.Lookup(ctx, q, s.table)
		switch {
		case err == nil:
			if s.idColumn == "" {
				rs.IDColumn = r.IDColumn
			}
			if !s.holdsGiven {
				rs.Holds = r.Holds
			} else if !m.sql.SameTable(s.holds, r.Holds) {
				return rs, fmt.Errorf("refset/schema: set %s: %w: HoldsTable %s is not the set's holds table: refset recorded the set with %s, "+
					"whose holds would be left to nobody; name %s, or leave HoldsTable empty",
					s.table, refset.ErrInvalidConfig, s.holds, r.Holds, r.Holds.Name)
			}
		case !errors.Is(err, refset.ErrNotFound):
			return rs, err
		}
	}
	cols, err := m.drv.Columns(ctx, q, s.table)
	if err != nil {
		return rs, fmt.Errorf("refset/schema: reading the columns of %s: %w", s.table, err)
	}
	if len(cols) == 0 {
		return rs, fmt.Errorf("refset/schema: set %s: no table %s (a Component before the sets may create it, "+
			"but a dry run cannot see what it would create: migrate that Component first): %w", s.table, s.table, refset.ErrSchema)
	}
	id, err := migration.IDColumn(s.table, rs.IDColumn, cols)
	if err != nil {
		return rs, err
	}
	rs.IDColumn, rs.IDType = id.Name, id.Type
	return rs, nil
}

// migrations are the dialect's set migrations (the down ones if down) written for s.
func (s resolvedSet) migrations(d refsetdriver.SchemaSQL, down bool) ([]migration.Migration, error) {
	ms, err := migration.Dialect(d, "set", down)
	if err != nil {
		return nil, err
	}
	data := map[string]string{
		"Table":    s.Table.Quoted(),
		"IDColumn": `"` + s.IDColumn + `"`,
		"IDType":   s.IDType,
		"Holds":    s.Holds.Quoted(),
		"Queue":    s.Queue.Quoted(),
	}
	for _, ix := range []struct {
		key   string
		table sqlident.Ident
		label string
	}{
		{"HolderIndex", s.Holds, "holder"},
		{"ExpiresIndex", s.Holds, "expires"},
		{"DueIndex", s.Queue, "due"},
	} {
		name, legacy := d.IndexName(ix.table.Name, ix.label)
		data[ix.key] = name
		data["Legacy"+ix.key] = ""
		if legacy != "" && legacy != s.Table.Name && legacy != s.Holds.Name && legacy != s.Queue.Name {
			// The name PostgreSQL made of the one too long for it, which may hold the
			// index, to be given the name that fits (0003_index_names.sql).
			if q, err := ix.table.WithName(legacy); err == nil {
				data["Legacy"+ix.key] = q.Quoted()
			}
		}
	}
	for i, mig := range ms {
		var b bytes.Buffer
		t, err := template.New(mig.Name).Option("missingkey=error").Parse(mig.SQL)
		if err == nil {
			err = t.Execute(&b, data)
		}
		if err != nil {
			return nil, fmt.Errorf("refset/schema: %s: %w", mig.Name, err)
		}
		ms[i].SQL = b.String()
	}
	return ms, nil
}

// registered reports whether q's database registers reg in refset_sets as it is.
func (m *Migrator) registered(ctx context.Context, q refset.Querier, reg refsetdriver.Registered) (bool, error) {
	if has, err := m.sql.HasSetTable(ctx, q); err != nil || !has {
		return false, err
	}
	r, err := m.sql.Lookup(ctx, q, reg.Table)
	if errors.Is(err, refset.ErrNotFound) {
		return false, nil
	}
	return err == nil && r.IDColumn == reg.IDColumn && r.Holds == reg.Holds && r.Queue == reg.Queue, err
}
