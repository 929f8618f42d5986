package schema

import (
	"context"
	"fmt"
	"strings"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"
)

// MigrateDown takes one of refset's own components back to version target by running
// its down migrations (NNNN_name.down.sql beside the up ones) from the recorded version
// down, in one transaction, and reports what it did. component is "core" or
// "set:<table>" as Applied names them; a set is found through its registration, which
// going to 0 removes. Going down drops tables and their rows: it is for undoing a
// release, or removing refset from a database, not for a set in use. A set with
// clean-up installed keeps the triggers clean-up put on its referencing tables,
// which write to the review queue: remove them first (DROP TRIGGER) or take the set
// only as far down as keeps the queue. The core goes below 1 only when no set is
// recorded (refset.ErrReferenced otherwise); refset_schema_version itself stays.
//
// Errors: refset.ErrInvalidConfig for an unknown component, a negative target, or a
// target above the recorded version (MigrateDown never goes up: use Apply);
// refset.ErrNotFound for a set that is not registered.
func MigrateDown(ctx context.Context, db refset.Database, d SQL, component string, target int) (Applied, error) {
	kind := "core"
	var table sqlident.Ident
	switch {
	case component == "core":
	case strings.HasPrefix(component, "set:"):
		kind = "set"
		var err error
		if table, err = sqlident.Parse(strings.TrimPrefix(component, "set:"), true); err != nil {
			return Applied{}, err
		}
	default:
		return Applied{}, fmt.Errorf("refset/schema: %w: cannot take %q down: MigrateDown undoes refset's own components (\"core\", \"set:<table>\")",
			refset.ErrInvalidConfig, component)
	}
	if target < 0 {
		return Applied{}, fmt.Errorf("refset/schema: %w: target version %d of %s is negative", refset.ErrInvalidConfig, target, component)
	}
	if err := refsetdriver.RefuseUnit(ctx, db, "a migration"); err != nil {
		return Applied{}, fmt.Errorf("refset/schema: %w", err)
	}
	var done Applied
	err := refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
		if err := d.LockMigrations(ctx, tx); err != nil {
			return err
		}
		current := 0
		if has, err := d.HasVersionTable(ctx, tx); err != nil {
			return err
		} else if has {
			if current, err = d.Version(ctx, tx, component); err != nil {
				return err
			}
		}
		done = Applied{Component: component, From: current, To: current}
		if target > current {
			return fmt.Errorf("refset/schema: %w: %s is at version %d, below target %d (MigrateDown only goes down; Apply goes up)",
				refset.ErrInvalidConfig, component, current, target)
		}
		if target == current {
			return nil
		}
		var downs []Migration
		var err error
		if kind == "core" {
			if target == 0 {
				sets, err := d.RecordedSets(ctx, tx)
				if err != nil {
					return err
				}
				if len(sets) > 0 {
					return fmt.Errorf("refset/schema: cannot take core to 0: refset_sets still records %s (take them to 0 first): %w",
						strings.Join(sets, ", "), refset.ErrReferenced)
				}
			}
			downs, err = dialectFiles(d, "core", true)
		} else {
			var r refsetdriver.Registered
			if r, err = d.Lookup(ctx, tx, table); err != nil {
				return err
			}
			downs, err = setMigrations(d, Set{Table: r.Table, IDColumn: r.IDColumn, Holds: r.Holds, Queue: r.Queue}, true)
		}
		if err != nil {
			return err
		}
		byVersion := map[int]Migration{}
		for _, m := range downs {
			byVersion[m.Version] = m
		}
		for v := current; v > target; v-- {
			m, ok := byVersion[v]
			if !ok {
				return fmt.Errorf("refset/schema: %s has no down migration for version %d", component, v)
			}
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return fmt.Errorf("refset/schema: %s %s: %w", component, m.Name, err)
			}
		}
		if err := d.SetVersion(ctx, tx, component, target); err != nil {
			return err
		}
		if kind == "set" && target == 0 {
			if err := d.Unregister(ctx, tx, table); err != nil {
				return err
			}
		}
		done.To = target
		return nil
	})
	if err != nil {
		return Applied{}, err
	}
	return done, nil
}
