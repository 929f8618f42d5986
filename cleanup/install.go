package cleanup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/refsetdb/refset/internal/ctxerr"
	"github.com/refsetdb/refset/internal/migration"
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
// index is named, as SQLite requires, after its table and column, in a name that
// PostgreSQL keeps whole (it would cut a longer one, perhaps to another index's name);
// Postgres puts it in its table's schema.
func indexStatement(r Reference) string {
	name, _ := migration.IndexName(maxIdentLen, r.Table.Name, r.Column+"_idx")
	return fmt.Sprintf(`CREATE INDEX "%s" ON %s ("%s")`, name, r.Table.Quoted(), r.Column)
}

// maxIdentLen is the longest name PostgreSQL keeps whole (NAMEDATALEN-1); SQLite
// takes such a name as well.
const maxIdentLen = 63

// Install reads the references of the set's table from the catalog, creates the
// review queue's triggers on every referencing table (replacing those of an earlier
// Install, so running it again after a schema change picks up new referencing tables),
// and returns a Collector. db is a database of store/sqlite or store/postgres
// (refset.ErrInvalidConfig for anything else). It is idempotent. It fails with
// ErrUnindexed if a referencing column has no index, and with refset.ErrSchema if a
// key it cannot follow would refuse deletes (or, with cfg.RefuseUndeclaredParts, a
// cascading key cfg.Parts does not declare); either way it changes nothing. Other
// errors: refset.ErrInvalidIdentifier (a bad table name in cfg), and those of
// refset.InTx (ErrConflict, ErrUnavailable, ErrTimeout, ErrClosed, the context's).
//
// The first Install on a set (and one after its triggers were dropped) finds objects
// that no trigger queued: those stored before clean-up was installed. It queues them
// for review a grace period from now, in pages of BatchSize objects, each page its
// own short transaction, so that it never holds the database's writer for long; the
// youngest of them may have holders about to reference them, and the grace period
// protects them as it does any new object. The pages walk the ID column's index
// once; a later Install does not walk it again. If Install fails or its ctx ends
// during the pages, the triggers stay installed and the objects not yet queued are
// left out: Check reports them as leaked, and Sweep queues them.
func Install(ctx context.Context, db refset.Database, cfg Config) (*Collector, error) {
	c, err := newCollector(db, cfg)
	if err != nil {
		return nil, err
	}
	table := c.plan.Table
	if err := refsetdriver.RefuseUnit(ctx, db, "clean-up's Install"); err != nil {
		return nil, fmt.Errorf("refset/cleanup: install %s: %w", table, err)
	}
	first, err := c.install(ctx, false)
	if err != nil {
		return nil, fmt.Errorf("refset/cleanup: install on %s: %w", table, err)
	}
	if first {
		if err := c.enqueueExisting(ctx); err != nil {
			return nil, fmt.Errorf("refset/cleanup: install on %s: queueing the objects stored before it: %w", table, err)
		}
	}
	return c, nil
}

// install reads the catalog into a new plan and creates its triggers, in one
// transaction, and publishes the plan. With keepGrace (a Collect following a new key)
// the triggers keep the grace period the database has, so that a collector never
// changes the program's. first says that the set had no trigger for new objects
// before: its objects were never queued.
func (c *Collector) install(ctx context.Context, keepGrace bool) (first bool, err error) {
	d := c.dialect
	var (
		p     *refsetdriver.Plan
		parts []refsetdriver.Part
	)
	err = refset.InTx(ctx, c.db, func(ctx context.Context, tx refset.Tx) error {
		p = c.replan()
		if err := d.SchemaSQL().LockMigrations(ctx, tx); err != nil {
			return err
		}
		if err := describe(ctx, tx, d, p); err != nil {
			return err
		}
		grace, ok, err := d.InstalledGrace(ctx, tx, p)
		if err != nil {
			return err
		}
		first = !ok
		if keepGrace && ok && grace > 0 {
			p.Grace = grace
		}
		if parts, err = c.readParts(ctx, tx, p); err != nil {
			return err
		}
		if undeclared := undeclaredParts(p, parts); c.strict && len(undeclared) > 0 {
			return fmt.Errorf("%w: %s %s ON DELETE CASCADE, so clean-up deletes its rows with the object and they keep nothing alive; "+
				"declare it ON DELETE RESTRICT if its rows hold the object, or name its table in Config.Parts if they are parts of it",
				refset.ErrSchema, strings.Join(undeclared, " and "), plural(len(undeclared), "is", "are"))
		}
		return d.Install(ctx, tx, p)
	})
	if err != nil {
		return false, err
	}
	c.mu.Lock()
	c.plan, c.unfollowed = p, nil
	c.mu.Unlock()
	for _, key := range undeclaredParts(p, parts) {
		c.log.Warn("refset/cleanup: a foreign key is ON DELETE CASCADE, and Config.Parts does not name its table: its rows count as parts of the object "+
			"and keep nothing alive, so clean-up deletes the object (and them) once nothing else references it; "+
			"declare it ON DELETE RESTRICT if its rows hold the object, or name its table in Config.Parts",
			slog.String("key", key))
	}
	for _, r := range p.References {
		if r.NoAction {
			c.log.Warn("refset/cleanup: a foreign key is ON DELETE NO ACTION; declare it ON DELETE RESTRICT to halve its check on every collected object",
				slog.String("reference", r.String()))
		}
	}
	return first, nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// readParts sets p.Parts to the part tables the collector's Config and the last
// Install declared, qualified as the catalog names them, and returns the cascading
// keys to the set.
func (c *Collector) readParts(ctx context.Context, q refset.Querier, p *refsetdriver.Plan) ([]refsetdriver.Part, error) {
	installed, err := c.dialect.InstalledParts(ctx, q, p)
	if err != nil {
		return nil, err
	}
	declared := installed
	for _, name := range c.parts {
		id, err := sqlident.Parse(name, true)
		if err == nil {
			id, err = c.dialect.Qualify(ctx, q, id)
		}
		if errors.Is(err, refset.ErrSchema) {
			continue // no such table: nothing of it to declare
		}
		if err != nil {
			return nil, err
		}
		if !slices.Contains(declared, id.String()) {
			declared = append(declared, id.String())
		}
	}
	p.Parts = declared
	return c.dialect.Parts(ctx, q, p.Table, p.Holds)
}

// undeclaredParts describes the cascading keys of parts whose table p.Parts does not
// name.
func undeclaredParts(p *refsetdriver.Plan, parts []refsetdriver.Part) []string {
	var out []string
	for _, part := range parts {
		if !slices.ContainsFunc(p.Parts, func(t string) bool { return strings.EqualFold(t, part.Table.String()) }) {
			out = append(out, part.Key)
		}
	}
	return out
}

// enqueueExisting queues every object of the set that is not queued, a page of the
// ID column's index per transaction (see Install).
func (c *Collector) enqueueExisting(ctx context.Context) error {
	p := c.current()
	var after any
	for {
		var last any
		err := refset.InTx(ctx, c.db, func(ctx context.Context, tx refset.Tx) error {
			var err error
			last, _, err = c.dialect.EnqueueExisting(ctx, tx, p, after, c.batch)
			return err
		})
		if err != nil || last == nil {
			return err
		}
		after = last
	}
}

// Inspect plans clean-up of cfg's set as Install does, from the set's registration
// and the catalog, but creates and replaces nothing: the triggers stay as the last
// Install left them. It exists for tools that only read (Check, Why, WhyAll): Install
// bakes cfg.Grace into the triggers, so a tool that installed with its own Config
// would change the grace period of the program that owns the set. It reads on the
// database's reader, outside any transaction.
//
// A referencing column without an index does not fail it: the reports answer all the
// same (probing that table costs a scan of it), and Unindexed names the indexes to
// create. Collect on an inspected collector relies on the triggers an Install made,
// and, like Install, refuses to collect while a column has no index: it then
// installs for the references the catalog has (keeping the installed grace period)
// once the indexes exist.
//
// Errors: refset.ErrNotFound (no set registered on cfg.Table), refset.ErrInvalidIdentifier,
// ErrSchema for a key Install could not follow, refset.ErrInvalidConfig as Install
// returns it, and the read errors of Check.
func Inspect(ctx context.Context, db refset.Database, cfg Config) (_ *Collector, err error) {
	defer func() { err = ctxerr.Wrap(ctx, err) }()
	c, err := newCollector(db, cfg)
	if err != nil {
		return nil, err
	}
	q := refsetdriver.ReaderFor(ctx, db)
	p := c.plan
	if err := describe(ctx, q, c.dialect, p); err != nil {
		var unindexed *UnindexedError
		if !errors.As(err, &unindexed) {
			return nil, fmt.Errorf("refset/cleanup: inspect %s: %w", cfg.Table, c.readError(err))
		}
		c.unfollowed = unindexed
	}
	if _, err := c.readParts(ctx, q, p); err != nil {
		return nil, fmt.Errorf("refset/cleanup: inspect %s: %w", cfg.Table, c.readError(err))
	}
	if cfg.Grace == 0 {
		// Objects the database refuses to delete are postponed by the grace period:
		// by the program's, as its Install left it in the triggers.
		grace, ok, err := c.dialect.InstalledGrace(ctx, q, p)
		if err != nil {
			return nil, fmt.Errorf("refset/cleanup: inspect %s: %w", cfg.Table, c.readError(err))
		}
		if ok && grace > 0 {
			p.Grace = grace
		}
	}
	return c, nil
}

// Unindexed lists the CREATE INDEX statements of the referencing columns that had no
// index when the collector last read the catalog (Inspect, or a Collect that found a
// new key), each valid SQL to run as it stands; none once Install or Collect has
// followed every key.
func (c *Collector) Unindexed() []string {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var unindexed *UnindexedError
	if errors.As(c.unfollowed, &unindexed) {
		return append([]string(nil), unindexed.Indexes...)
	}
	return nil
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
	if _, err := locate(ctx, refsetdriver.ReaderFor(ctx, db), c.dialect, c.plan); err != nil {
		return cfg, fmt.Errorf("refset/cleanup: installed settings of %s: %w", table, c.readError(err))
	}
	grace, ok, err := c.dialect.InstalledGrace(ctx, refsetdriver.ReaderFor(ctx, db), c.plan)
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
	p.IDColumn, p.RegisteredQueue, p.RegisteredTable = reg.IDColumn, reg.Queue.String(), reg.Table.String()
	if p.Collected, err = d.CountsCollected(ctx, q); err != nil {
		return reg, err
	}
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
	// Read before the references: a key added between the two leaves the plan
	// stale, which a batch finds, rather than unseen.
	if p.Keys, err = d.Keys(ctx, q, p); err != nil {
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
