package schema

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/refsetdb/refset/internal/migration"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"
)

// Direction is the way a migration goes.
type Direction string

const (
	// DirectionUp applies migrations not yet applied.
	DirectionUp Direction = "up"
	// DirectionDown undoes applied migrations with their down files, dropping tables
	// and their rows.
	DirectionDown Direction = "down"
)

// Config is what a Migrator keeps up to date, beside refset's own core tables, which
// every Migrator covers (component "core").
type Config struct {
	// Sets are the sets whose tables (a holds table and a review queue each, with a
	// FOREIGN KEY to the object table) the migrator keeps, each recorded as component
	// "set:<table>" and registered in refset_sets, where clean-up and the operators'
	// command find them. A store builds its set's tables itself (store.NewStore); list
	// a set here to migrate it before the program starts, or to check it.
	Sets []Set
	// Components are a program's or a package's own migrations, each recorded under
	// its Name. They run after refset's core, in order, before the sets (whose object
	// tables they may create), except those with AfterSets.
	Components []Component
}

// Set names a set's tables, as store.Config does.
type Set struct {
	// Table is the object table, optionally schema-qualified (PostgreSQL). It must
	// exist when its set migrates: a Component before the sets may create it.
	Table string
	// IDColumn is the column of the objects' IDs, the table's one-column primary key;
	// "" means the one the set is registered with, or else the primary key.
	IDColumn string
	// HoldsTable names the holds table; "" means the one the set is registered with,
	// or else Table + "_holds", in the same schema.
	HoldsTable string
}

// Component is a set of migrations of one's own: the files NNNN_name.sql at the root
// of Migrations, applied in version order, and optionally NNNN_name.down.sql beside
// them, which undo them (DirectionDown). Write them for the database's dialect: a
// program on both databases keeps a folder per dialect and picks it by
// db.Driver().Name(), as blockmanager and examples/custody do.
type Component struct {
	// Name is what the component's version is recorded under in
	// refset_schema_version: not "core", nor starting with "set:", and never
	// renamed, or its migrations run again.
	Name string
	// Migrations holds the files, an embed.FS's sub-folder (fs.Sub) for instance.
	Migrations fs.FS
	// AfterSets runs the component after the sets, for migrations that use a set's
	// holds table.
	AfterSets bool
}

// MigrateOpts narrows a migration. The zero value (or nil) migrates every component
// up to its latest version.
type MigrateOpts struct {
	// Component is the one component to migrate: "core", "set:<table>" or a
	// Component's Name. Up, refset's core is brought up to date first and the other
	// components are left alone. A down migration needs it, and so do TargetVersion
	// and MaxSteps, since each component has versions of its own.
	Component string
	// TargetVersion is the version to take Component to. Up, 0 means its latest, and
	// a target at or below its version does nothing. Down, -1 means 0, which removes
	// the component's tables (for a set, its registration too).
	TargetVersion int
	// MaxSteps bounds how many of Component's migrations run (its files, not the
	// numbers between them: across a gap in the versions, a step is the next file):
	// 0 means no bound up, and one step down unless TargetVersion says where to stop
	// (with both, it stops at whichever comes first).
	MaxSteps int
	// DryRun changes nothing: the result lists what would run, with its SQL, read
	// without a lock. Its SQL() is the script a DBA runs where the application's role
	// may not create tables (store.Options.ExternalMigrations).
	DryRun bool
}

// Migrator runs the migrations of refset's core, of the sets and of the components
// of its Config on one database. Make one with New (a zero Migrator refuses to run,
// with refset.ErrInvalidConfig); it is safe for concurrent use,
// and so are several Migrators, in several processes, on one database: an advisory
// lock on PostgreSQL and SQLite's single writer serialise them, and a version
// recorded is never applied again, whatever the isolation of the database's
// transactions (postgres.Options.Isolation): one that waited for the lock while
// another migrated starts over when its snapshot missed what the other committed.
type Migrator struct {
	db    refset.Database
	drv   refsetdriver.Driver
	sql   refsetdriver.SchemaSQL
	units []unit // in the order an up migration runs them
}

// unit is one component of a Migrator.
type unit struct {
	component string
	kind      unitKind
	set       setSpec               // a set's
	up        []migration.Migration // core's and a Component's up migrations
	down      []migration.Migration // a Component's down migrations
}

type unitKind int

const (
	kindCore unitKind = iota
	kindSet
	kindFiles
)

// setSpec is a Set checked: its names parsed, not yet read from the catalog.
type setSpec struct {
	table, holds, queue sqlident.Ident
	idColumn            string // "" until resolved
	holdsGiven          bool   // Set.HoldsTable was set
}

// New returns the migrator of db, a database of store/sqlite or store/postgres, for
// refset's core and cfg. It reads the components' files but not the database.
//
// Errors, changing nothing: refset.ErrInvalidConfig for a database that is not a
// store's, a component without a name or files, with a name taken or reserved, or
// with a file not named NNNN_name.sql (or NNNN_name.down.sql), two files of one
// version (up or down), a version above 2147483647 (what refset_schema_version
// records; not a timestamp), a file with nothing but white space in it (one meant to
// do nothing says so in a comment) or a down file whose version has no up one, and
// for a set given twice; refset.ErrInvalidIdentifier for a name that is not an SQL
// identifier. The versions need not follow each other: a gap is fine.
func New(db refset.Database, cfg Config) (*Migrator, error) {
	drv, err := refsetdriver.Of(db)
	if err != nil {
		return nil, fmt.Errorf("refset/schema: %w", err)
	}
	m := &Migrator{db: db, drv: drv, sql: drv.SchemaSQL()}
	core, err := migration.Dialect(m.sql, "core", false)
	if err != nil {
		return nil, err
	}
	m.units = append(m.units, unit{component: "core", kind: kindCore, up: core})
	seen := map[string]bool{"core": true}
	var sets, after []unit
	for _, c := range cfg.Components {
		u, err := filesUnit(c, seen)
		if err != nil {
			return nil, fmt.Errorf("refset/schema: component %q: %w", c.Name, err)
		}
		if c.AfterSets {
			after = append(after, u)
		} else {
			m.units = append(m.units, u)
		}
	}
	for _, s := range cfg.Sets {
		table, holds, queue, err := migration.SetTables(s.Table, s.HoldsTable)
		if err == nil && s.IDColumn != "" {
			_, err = sqlident.Parse(s.IDColumn, false)
		}
		if err != nil {
			return nil, fmt.Errorf("refset/schema: set %q: %w", s.Table, err)
		}
		u := unit{component: setComponent(table), kind: kindSet,
			set: setSpec{table: table, holds: holds, queue: queue, idColumn: s.IDColumn, holdsGiven: s.HoldsTable != ""}}
		if seen[u.component] {
			return nil, fmt.Errorf("refset/schema: %w: set %s is given twice", refset.ErrInvalidConfig, table)
		}
		seen[u.component] = true
		sets = append(sets, u)
	}
	m.units = append(append(m.units, sets...), after...)
	return m, nil
}

// filesUnit is c checked, its up migrations read; seen are the names taken.
func filesUnit(c Component, seen map[string]bool) (unit, error) {
	switch {
	case c.Name == "" || c.Name == "core" || strings.HasPrefix(c.Name, "set:"):
		return unit{}, fmt.Errorf("%w: a component needs a name of its own (not \"\", \"core\" or \"set:...\")", refset.ErrInvalidConfig)
	case seen[c.Name]:
		return unit{}, fmt.Errorf("%w: the name is given twice", refset.ErrInvalidConfig)
	case c.Migrations == nil:
		return unit{}, fmt.Errorf("%w: no Migrations", refset.ErrInvalidConfig)
	}
	ms, err := migration.Read(c.Migrations, false)
	if err != nil {
		return unit{}, fmt.Errorf("%w: %w", refset.ErrInvalidConfig, err)
	}
	// The down files are checked now too: a mistake in them would otherwise surface
	// only when an operator needs them.
	downs, err := migration.Read(c.Migrations, true)
	if err != nil {
		return unit{}, fmt.Errorf("%w: %w", refset.ErrInvalidConfig, err)
	}
	ups := map[int]bool{}
	for _, mig := range ms {
		ups[mig.Version] = true
	}
	for _, d := range downs {
		if !ups[d.Version] {
			return unit{}, fmt.Errorf("%w: %s undoes version %d, which has no up migration (NNNN_name.sql)",
				refset.ErrInvalidConfig, d.Name, d.Version)
		}
	}
	seen[c.Name] = true
	return unit{component: c.Name, kind: kindFiles, up: ms, down: downs}, nil
}

// setComponent is the component under which a set's versions are recorded.
func setComponent(table sqlident.Ident) string { return "set:" + table.String() }

// Migrate migrates the database in direction, narrowed by opts (nil: every
// component up to its latest version), in one transaction, and returns what ran; a
// dry run (opts.DryRun) returns what would run and changes nothing. Up, it creates
// only what is missing, so it is safe to run at every start: a component whose
// tables are gone (dropped by hand, or by DROP SCHEMA ... CASCADE while refset's
// record lives in another schema) has its migrations run again, for refset's core
// and sets; a Component's are not checked (after dropping its tables, take it down
// or delete its row from refset_schema_version). Down, it runs the component's down
// files from its version down: for undoing a release, or removing refset from a
// database, never for a set in use. A set with clean-up installed keeps the
// triggers clean-up put on its referencing tables, which write to the review queue:
// drop them first, or keep the queue (version 2). refset's core goes below 1 only
// when no set is recorded.
//
// Errors, each changing nothing: refset.ErrInvalidConfig for a direction or an
// option that cannot work (a Component not of this migrator, a TargetVersion or
// MaxSteps without one, a down migration without one, a target beyond the latest
// version, a down target above the version, a version with no down file);
// refset.ErrSchema for a set whose object table is missing or has no one-column
// primary key, and for taking down a component from a version this program does not
// know (above its latest: a newer release migrated it, and only that one has the
// down files); refset.ErrReferenced for taking the core to 0 while sets are
// recorded; refset.ErrNotFound for taking down a set that is not registered; and the
// database's errors, as refset.InTx returns them.
func (m *Migrator) Migrate(ctx context.Context, direction Direction, opts *MigrateOpts) (*MigrateResult, error) {
	if m == nil || m.sql == nil {
		return nil, fmt.Errorf("refset/schema: %w: a Migrator is made by schema.New", refset.ErrInvalidConfig)
	}
	var o MigrateOpts
	if opts != nil {
		o = *opts
	}
	named, err := m.check(direction, o)
	if err != nil {
		return nil, err
	}
	run := func(q refset.Querier, tx refset.Tx) (*MigrateResult, error) {
		if direction == DirectionDown {
			return m.down(ctx, q, tx, named, o)
		}
		return m.up(ctx, q, tx, o)
	}
	if o.DryRun {
		res, err := run(refsetdriver.ReaderFor(ctx, m.db), nil)
		if err != nil && !refset.IsSentinel(err) {
			err = m.db.TranslateError(err, "")
		}
		return res, err
	}
	if err := refsetdriver.RefuseUnit(ctx, m.db, "a migration"); err != nil {
		return nil, fmt.Errorf("refset/schema: %w", err)
	}
	var res *MigrateResult
	for starts := 1; ; starts++ {
		err = refset.InTx(ctx, m.db, func(ctx context.Context, tx refset.Tx) error {
			// Held to the end of the transaction: a second process waits here, then finds
			// everything applied.
			if err := m.sql.LockMigrations(ctx, tx); err != nil {
				return err
			}
			if direction == DirectionUp {
				if _, err := tx.ExecContext(ctx, m.sql.VersionTable()); err != nil {
					return err
				}
			}
			if err := m.touch(ctx, tx); err != nil {
				return err
			}
			var err error
			res, err = run(tx, tx) // a retried transaction starts over
			return err
		})
		var stale *staleError
		if !errors.As(err, &stale) || ctx.Err() != nil || starts == maxStarts {
			break
		}
		// Another migration committed while this one waited for the lock, after its
		// snapshot: start over, with a snapshot that sees it.
	}
	if err != nil {
		if stale := (*staleError)(nil); errors.As(err, &stale) { // ctx ended, or maxStarts
			err = refsetdriver.ContextError(ctx, stale.err)
		}
		return nil, err
	}
	return res, nil
}

// touch rewrites the record of core's version as it stands, in a migration's
// transaction, just after the lock. Every migration does, so that one which waited
// for the lock while another ran and committed finds out, whatever the isolation of
// the database's transactions: under REPEATABLE READ or SERIALIZABLE
// (postgres.Options.Isolation) the snapshot it reads was taken when it asked for the
// lock, before the other committed, and it would run the other's migrations again.
// Rewriting a row that the other rewrote since fails with a serialization failure,
// which touch returns as a *staleError, on which Migrate starts over. Under READ
// COMMITTED (and on SQLite) each statement sees what committed before it, and the
// rewrite changes nothing.
func (m *Migrator) touch(ctx context.Context, tx refset.Tx) error {
	if has, err := m.sql.HasVersionTable(ctx, tx); err != nil || !has {
		return err
	}
	v, err := m.sql.Version(ctx, tx, "core")
	if err != nil || v == 0 {
		// No core recorded (as far as this snapshot sees): core migrates first, and
		// its record, written by another since, fails that write instead.
		return err
	}
	if err := m.sql.SetVersion(ctx, tx, "core", v); err != nil {
		if errors.Is(err, refset.ErrConflict) {
			return &staleError{err: err}
		}
		return err
	}
	return nil
}

// maxStarts bounds how many times Migrate starts over after a *staleError: each
// time, another migration ran to its end, so only as many replicas as this,
// migrating at once, could keep one starting over.
const maxStarts = 1000

// staleError says a migration's snapshot missed another migration that committed
// while it waited for the lock. It matches no sentinel, so that InTx, whose retries
// of a conflict are bounded, hands it back to Migrate, which starts over for as long
// as its context lets it (and maxStarts): each time, another migration ran to its
// end.
type staleError struct{ err error }

func (e *staleError) Error() string {
	return "refset/schema: another migration committed while this one waited for the lock: " + e.err.Error()
}

// check refuses a direction and options that cannot work, and returns the unit
// o.Component names, if any.
func (m *Migrator) check(direction Direction, o MigrateOpts) (*unit, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("refset/schema: %w: "+format, append([]any{refset.ErrInvalidConfig}, args...)...)
	}
	if direction != DirectionUp && direction != DirectionDown {
		return nil, bad("direction %q (want schema.DirectionUp or schema.DirectionDown)", direction)
	}
	if o.Component == "" {
		switch {
		case direction == DirectionDown:
			return nil, bad("a down migration needs MigrateOpts.Component, the one component to take down")
		case o.TargetVersion != 0 || o.MaxSteps != 0:
			return nil, bad("TargetVersion and MaxSteps need MigrateOpts.Component: each component has versions of its own")
		}
		return nil, nil
	}
	var named *unit
	var names []string
	for i, u := range m.units {
		names = append(names, u.component)
		if u.component == o.Component {
			named = &m.units[i]
		}
	}
	switch {
	case named == nil:
		return nil, bad("%q is not a component of this migrator (%s)", o.Component, strings.Join(names, ", "))
	case o.MaxSteps < 0:
		return nil, bad("MaxSteps %d is negative", o.MaxSteps)
	case o.TargetVersion < -1 || (o.TargetVersion == -1 && direction == DirectionUp):
		return nil, bad("TargetVersion %d of %s (want a version, or -1 down for 0)", o.TargetVersion, o.Component)
	}
	return named, nil
}

// Validate reports whether the database is at the versions this code needs: nil,
// or a *PendingError (refset.ErrSchema) whose Plan is what an up migration would
// run, with its script. It changes nothing and takes no lock: it is what a store
// does at NewStore instead of migrating when its database has ExternalMigrations. A
// component at a version above the latest this code knows (a newer release of the
// program migrated it, as in a rolling deployment) is up to date for it, and Migrate
// up leaves it, and its record, as it is.
func (m *Migrator) Validate(ctx context.Context) error {
	plan, err := m.Migrate(ctx, DirectionUp, &MigrateOpts{DryRun: true})
	if err != nil {
		return err
	}
	if len(plan.Steps) > 0 {
		return &PendingError{Plan: plan}
	}
	return nil
}
