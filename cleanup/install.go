package cleanup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/refsetdb/refset/internal/ctxerr"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"
)

// This file binds clean-up to the database: the set's registration and the catalog
// make its plan (describe), and Install has the dialect create the triggers that
// fill the review queue.

// ErrUnindexed: a referencing column has no index, so every review would scan its
// table. Install returns it as an *UnindexedError, which holds the statements that
// create the missing indexes.
var ErrUnindexed = errors.New("referencing column has no index")

// UnindexedError is Install's refusal of references without an index. It matches
// ErrUnindexed.
type UnindexedError struct {
	Table string
	// Indexes are CREATE INDEX statements, one per unindexed reference, valid SQL on
	// the set's database as they stand: a migration can run them verbatim.
	Indexes []string
}

func (e *UnindexedError) Error() string {
	return fmt.Sprintf("%s: %v; create: %s", e.Table, ErrUnindexed, strings.Join(e.Indexes, "; "))
}

// Is makes errors.Is(err, ErrUnindexed) hold.
func (e *UnindexedError) Is(target error) bool { return target == ErrUnindexed }

// indexStatement is the CREATE INDEX that makes a review of r an index probe. The
// index is named, as SQLite requires; Postgres puts it in its table's schema.
func indexStatement(r Reference) string {
	name := r.Table.Name + "_" + r.Column + "_idx"
	if len(name) > maxIdentLen {
		name = name[:maxIdentLen]
	}
	return fmt.Sprintf(`CREATE INDEX "%s" ON %s ("%s")`, name, r.Table.Quoted(), r.Column)
}

// maxIdentLen is the longest name Postgres keeps whole (NAMEDATALEN-1).
const maxIdentLen = 63

// Install reads the references of the set's table from the catalog, creates the
// review queue's triggers on every referencing table (replacing those of an earlier
// Install, so running it again after a schema change picks up new referencing tables),
// and returns a Collector. db is a database of store/sqlite or store/postgres
// (refset.ErrInvalidConfig for anything else). It is idempotent. It fails with
// ErrUnindexed if a referencing column has no index, and with refset.ErrSchema if a
// key it cannot follow would refuse deletes; either way it changes nothing. Other
// errors: refset.ErrInvalidIdentifier (a bad table name in cfg), and those of
// refset.InTx (ErrConflict, ErrUnavailable, ErrTimeout, ErrClosed, the context's).
func Install(ctx context.Context, db refset.Database, cfg Config) (*Collector, error) {
	c, err := newCollector(db, cfg)
	if err != nil {
		return nil, err
	}
	d, p, table := c.dialect, &c.plan, c.plan.Table
	if err := refsetdriver.RefuseUnit(ctx, db, "clean-up's Install"); err != nil {
		return nil, fmt.Errorf("refset/cleanup: install %s: %w", table, err)
	}
	var parts []string
	err = refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
		if err := d.SchemaSQL().LockMigrations(ctx, tx); err != nil {
			return err
		}
		if err := describe(ctx, tx, d, p); err != nil {
			return err
		}
		var err error
		if parts, err = d.Parts(ctx, tx, p.Table, p.Holds); err != nil {
			return err
		}
		return d.Install(ctx, tx, p)
	})
	if err != nil {
		return nil, fmt.Errorf("refset/cleanup: install on %s: %w", table, err)
	}
	for _, key := range parts {
		c.log.Info("refset/cleanup: a foreign key is ON DELETE CASCADE: its rows count as parts of the object and keep nothing alive, "+
			"so clean-up deletes the object (and them) once nothing else references it; declare it ON DELETE RESTRICT if its rows hold the object",
			slog.String("key", key))
	}
	for _, r := range p.References {
		if r.NoAction {
			c.log.Warn("refset/cleanup: a foreign key is ON DELETE NO ACTION; declare it ON DELETE RESTRICT to halve its check on every collected object",
				slog.String("reference", r.String()))
		}
	}
	return c, nil
}

// Inspect plans clean-up of cfg's set as Install does, from the set's registration
// and the catalog, but creates and replaces nothing: the triggers stay as the last
// Install left them. It exists for tools that only read (Check, Why, WhyAll): Install
// bakes cfg.Grace into the triggers, so a tool that installed with its own Config
// would change the grace period of the program that owns the set. Collect on an
// inspected collector works, and relies on the triggers an Install made. It reads on
// the database's reader, outside any transaction.
//
// Errors: refset.ErrNotFound (no set registered on cfg.Table), refset.ErrInvalidIdentifier,
// ErrSchema for a key Install could not follow, ErrUnindexed as Install returns it,
// refset.ErrInvalidConfig as Install returns it, and the read errors of Check.
func Inspect(ctx context.Context, db refset.Database, cfg Config) (_ *Collector, err error) {
	defer func() { err = ctxerr.Wrap(ctx, err) }()
	c, err := newCollector(db, cfg)
	if err != nil {
		return nil, err
	}
	if err := describe(ctx, refsetdriver.ReaderFor(ctx, db), c.dialect, &c.plan); err != nil {
		if !errors.Is(err, ErrUnindexed) {
			err = c.readError(err)
		}
		return nil, fmt.Errorf("refset/cleanup: inspect %s: %w", cfg.Table, err)
	}
	if cfg.Grace == 0 {
		// Objects the database refuses to delete are postponed by the grace period:
		// by the program's, as its Install left it in the triggers.
		grace, ok, err := c.dialect.InstalledGrace(ctx, refsetdriver.ReaderFor(ctx, db), &c.plan)
		if err != nil {
			return nil, fmt.Errorf("refset/cleanup: inspect %s: %w", cfg.Table, c.readError(err))
		}
		if ok && grace > 0 {
			c.plan.Grace = grace
		}
	}
	return c, nil
}

// Installed is the Config the last Install left in the database for the set on
// table: its Table, and its Grace as the set's triggers apply it to new objects (zero,
// which Install takes as DefaultGrace, when no Install made them). Grace is the one
// setting of Config the database keeps; the others are each collector's own. A tool
// that installs clean-up on a set a program owns (the refset command's collect and
// sweep) installs with it, so that it keeps the program's grace period. It reads on the
// database's reader.
//
// Errors: refset.ErrNotFound (no set registered on table), refset.ErrInvalidIdentifier,
// refset.ErrSchema (its tables are gone), and the read errors of Check.
func Installed(ctx context.Context, db refset.Database, table string) (_ Config, err error) {
	defer func() { err = ctxerr.Wrap(ctx, err) }()
	c, err := newCollector(db, Config{Table: table})
	if err != nil {
		return Config{}, err
	}
	cfg := Config{Table: table}
	if _, err := locate(ctx, refsetdriver.ReaderFor(ctx, db), c.dialect, &c.plan); err != nil {
		return cfg, fmt.Errorf("refset/cleanup: installed settings of %s: %w", table, c.readError(err))
	}
	grace, ok, err := c.dialect.InstalledGrace(ctx, refsetdriver.ReaderFor(ctx, db), &c.plan)
	if err != nil {
		return cfg, fmt.Errorf("refset/cleanup: installed settings of %s: %w", table, c.readError(err))
	}
	if ok && grace > 0 {
		cfg.Grace = grace
	}
	return cfg, nil
}

// locate completes p, which knows only its table, with what the set's registration
// says and the session resolves: the qualified names of its tables and its ID column.
func locate(ctx context.Context, q refset.Querier, d refsetdriver.Driver, p *refsetdriver.Plan) (refsetdriver.Registered, error) {
	reg, err := d.SchemaSQL().Lookup(ctx, q, p.Table)
	if err != nil {
		return reg, err
	}
	p.IDColumn, p.RegisteredQueue = reg.IDColumn, reg.Queue.String()
	// Resolved once, here: the triggers must name the same tables in every
	// session, whatever its search path.
	for _, n := range []struct {
		to   *sqlident.Ident
		name sqlident.Ident
	}{{&p.Table, reg.Table}, {&p.Holds, reg.Holds}, {&p.Queue, reg.Queue}} {
		if *n.to, err = d.Qualify(ctx, q, n.name); err != nil {
			return reg, err
		}
	}
	return reg, nil
}

// describe completes p, which knows only its table, from the set's registration and
// the catalog, through q: the qualified names, the ID type and every reference. It
// fails with an *UnindexedError if a referencing column has no index.
func describe(ctx context.Context, q refset.Querier, d refsetdriver.Driver, p *refsetdriver.Plan) error {
	reg, err := locate(ctx, q, d, p)
	if err != nil {
		return err
	}
	p.IDType, p.References, err = d.Describe(ctx, q, p.Table, p.IDColumn)
	if err != nil {
		return err
	}
	unindexed := &UnindexedError{Table: reg.Table.String()}
	for _, r := range p.References {
		if !r.Indexed {
			unindexed.Indexes = append(unindexed.Indexes, indexStatement(r))
		}
	}
	if len(unindexed.Indexes) > 0 {
		return unindexed
	}
	return nil
}
