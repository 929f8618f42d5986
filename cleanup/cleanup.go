package cleanup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/refsetdb/refset/internal/ctxerr"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/schema"
	"github.com/refsetdb/refset/sqlident"
)

// Defaults for the zero Config.
const (
	DefaultGrace     = 10 * time.Minute
	DefaultBatchSize = 1000
	// DefaultRetryDelay is how far an object is postponed when a concurrent
	// transaction was referencing it during a review.
	DefaultRetryDelay = time.Second
)

// Config configures a Collector. The zero value (but for Table) is a sane default.
type Config struct {
	// Table is the set's object table, written as in the store's Config. The store
	// must have been built (it registers the set and creates its holds table and
	// review queue).
	Table string
	// Grace is how long a new object may stay unreferenced before it is collected.
	// Zero means DefaultGrace.
	Grace time.Duration
	// BatchSize bounds the queue entries (and expired holds) one transaction handles,
	// and the objects it deletes: the garbage it claimed and what that alone kept
	// alive along the edges (the blocks of an abandoned chain). Zero means
	// DefaultBatchSize.
	BatchSize int
	// RetryDelay is how far an object is postponed when another transaction held a
	// lock on it during its review. Zero means DefaultRetryDelay.
	RetryDelay time.Duration
	// Workers is how many batches one Collect call runs at once, each in its own
	// transaction; entries one has claimed the others skip. Zero means 2. (SQLite has
	// one writer, so there they take turns.)
	Workers int
	// Logger receives each Collect's result (debug; a warning when objects were
	// refused), Run's failed passes (warn) and why Run stopped (error). Nil means the
	// database's logger (the stores' Options.Logger), if any.
	Logger *slog.Logger
}

// Reference is one FOREIGN KEY that points at the set's ID column.
type Reference struct {
	Table   sqlident.Ident // the referencing table
	Column  string         // the referencing column
	Self    bool           // the object table referencing itself: an edge, not a root
	Indexed bool           // an index leads with Column, so a review need not scan Table
	Key     []string       // the referencing table's primary key columns, for Why
	// NoAction is a key declared ON DELETE NO ACTION (the default), not deferrable.
	// PostgreSQL checks such a key twice for each object Collect deletes (once that
	// no other row now has the deleted key, once that nothing references it), where
	// RESTRICT checks once: Install logs the hint.
	NoAction bool
}

func (r Reference) String() string { return r.Table.String() + "." + r.Column }

// UnfollowedKeys is the error a Dialect's Describe returns for foreign keys to the
// set's table that Install cannot follow and that would refuse an object's deletion
// (ON DELETE NO ACTION or RESTRICT): each key, as the dialect describes it (its name,
// table and columns), would keep objects alive that Collect could never account
// for. It matches refset.ErrSchema.
func UnfollowedKeys(table sqlident.Ident, idColumn string, keys []string) error {
	return fmt.Errorf("%w: %s is referenced by %s; clean-up follows foreign keys of one column to the ID column %q "+
		"(keys ON DELETE CASCADE, SET NULL or SET DEFAULT never refuse a delete and are left alone): "+
		"reference %q instead, or declare the key ON DELETE CASCADE if its rows are parts of the object",
		refset.ErrSchema, table, strings.Join(keys, " and "), idColumn, idColumn)
}

// Plan is everything a dialect needs to know about a set to collect it.
type Plan struct {
	Table      sqlident.Ident
	IDColumn   string
	IDType     string
	Holds      sqlident.Ident
	Queue      sqlident.Ident
	References []Reference
	Grace      time.Duration
	RetryDelay time.Duration

	// registeredQueue is the queue's name as the set's store registered it, before
	// Qualify: Name derives from it, so the names of an earlier Install's triggers
	// and functions stay those of this one.
	registeredQueue string
}

// Batch is what one collection transaction did.
type Batch struct {
	Reviewed  int64 // queue entries claimed
	Deleted   int64 // objects deleted
	Postponed int64 // objects another transaction was referencing; reviewed again later
	// Refused counts objects the database would not delete because of a reference
	// Install did not find (a foreign key added since): they are postponed by a grace
	// period, and the rest of the batch is collected all the same. Install again to
	// follow the new key.
	Refused int64
}

// Dialect is the SQL of one database, written by a store package: store/sqlite and
// store/postgres implement it and build collectors with it (NewCollector). Do not
// implement it outside a store; it grows with clean-up.
type Dialect interface {
	// Schema names the dialect.
	Schema() schema.Dialect
	// SchemaSQL is the dialect's migrations of refset's own tables, and their lock.
	SchemaSQL() schema.SQL
	// Clock is how the dialect keeps time in refset's tables, for reports.
	Clock() Clock
	// RowAddress is the expression naming a row of any table in reports (Postgres
	// ctid, SQLite rowid), for tables without a primary key.
	RowAddress() string
	// Qualify names the table the session finds under name with its schema, so that
	// SQL written with it means the same table in every session (a Postgres trigger
	// runs with the search path of whoever fires it). A dialect without schemas
	// returns name.
	Qualify(ctx context.Context, q refset.Querier, name sqlident.Ident) (sqlident.Ident, error)
	// Describe reads the ID column's type and every reference to it from the catalog.
	// A key to the table that refuses deletion but does not reference the ID column
	// alone fails it with UnfollowedKeys.
	Describe(ctx context.Context, q refset.Querier, table sqlident.Ident, idColumn string) (idType string, refs []Reference, err error)
	// Install creates or replaces the triggers of p, inside tx.
	Install(ctx context.Context, tx refset.Tx, p *Plan) error
	// ExpireHolds deletes up to limit expired holds.
	ExpireHolds(ctx context.Context, tx refset.Tx, p *Plan, limit int) (int64, error)
	// CollectBatch reviews up to limit due queue entries. An object the database
	// refuses to delete (a reference Install did not find) must not fail the batch: it
	// is counted in Batch.Refused and postponed by p.Grace.
	CollectBatch(ctx context.Context, tx refset.Tx, p *Plan, limit int) (Batch, error)
	// EnqueueUnreachable queues, due now, every object no root reaches.
	EnqueueUnreachable(ctx context.Context, tx refset.Tx, p *Plan) (int64, error)
	// Reach is a WITH RECURSIVE clause defining reach(id): every object reachable
	// from a root (and, when withQueue, from a queued object) along the edges.
	Reach(p *Plan, withQueue bool) string
	// Text renders the SQL expression expr as a literal in text, for reports.
	Text(expr string) string
	// SchemaError reports whether err says a table or column is missing: the set's
	// schema changed under the collector, and no retry mends that.
	SchemaError(err error) bool
}

// Stats is what a Collect call did.
type Stats struct {
	Batches      int
	Reviewed     int64
	Deleted      int64
	Postponed    int64
	Refused      int64 // see Batch.Refused; not zero means Install should run again
	HoldsExpired int64
	Duration     time.Duration
}

func (s Stats) String() string {
	return fmt.Sprintf("reviewed %d, deleted %d, postponed %d, refused %d, holds expired %d in %d batches, %v",
		s.Reviewed, s.Deleted, s.Postponed, s.Refused, s.HoldsExpired, s.Batches, s.Duration.Round(time.Microsecond))
}

// Collector collects the garbage of one set. It is safe for concurrent use, and
// several collectors, in one process or many, may work on one set at once.
type Collector struct {
	db      refset.Database
	dialect Dialect
	plan    Plan
	batch   int
	workers int
	log     *slog.Logger
	obs     refset.Observer
}

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
// and returns a Collector. It is idempotent. It fails with ErrUnindexed if a
// referencing column has no index, and with refset.ErrSchema if a key it cannot
// follow would refuse deletes (see UnfollowedKeys); either way it changes nothing.
// Other errors: refset.ErrInvalidIdentifier (a bad table name in cfg), and those of
// refset.InTx (ErrConflict, ErrUnavailable, ErrTimeout, ErrClosed, the context's).
func Install(ctx context.Context, db refset.Database, d Dialect, cfg Config) (*Collector, error) {
	c, err := newCollector(db, d, cfg)
	if err != nil {
		return nil, err
	}
	p, table := &c.plan, c.plan.Table
	err = refset.InTx(ctx, db, func(tx refset.Tx) error {
		if err := schema.Lock(ctx, tx, d.SchemaSQL()); err != nil {
			return err
		}
		reg, err := schema.Lookup(ctx, tx, d.Schema(), table)
		if err != nil {
			return err
		}
		if err := describe(ctx, tx, d, p, reg); err != nil {
			return err
		}
		return d.Install(ctx, tx, p)
	})
	if err != nil {
		return nil, fmt.Errorf("refset/cleanup: install on %s: %w", table, err)
	}
	for _, r := range p.References {
		if r.NoAction {
			c.log.Warn("refset/cleanup: a foreign key is ON DELETE NO ACTION; declare it ON DELETE RESTRICT to halve its check on every collected object",
				slog.String("reference", r.String()))
		}
	}
	return c, nil
}

// newCollector checks cfg and fills in its defaults: a Collector whose plan knows
// only its table and times until describe completes it.
func newCollector(db refset.Database, d Dialect, cfg Config) (*Collector, error) {
	table, err := sqlident.Parse(cfg.Table, true)
	if err != nil {
		return nil, err
	}
	if cfg.Grace < 0 || cfg.BatchSize < 0 || cfg.RetryDelay < 0 || cfg.Workers < 0 {
		return nil, fmt.Errorf("refset/cleanup: %w: negative Grace, BatchSize, RetryDelay or Workers in %+v", refset.ErrInvalidConfig, cfg)
	}
	workers := cfg.Workers
	if workers == 0 {
		workers = 2
	}
	p := Plan{Table: table, Grace: cfg.Grace, RetryDelay: cfg.RetryDelay}
	if p.Grace == 0 {
		p.Grace = DefaultGrace
	}
	if p.RetryDelay == 0 {
		p.RetryDelay = DefaultRetryDelay
	}
	batch := cfg.BatchSize
	if batch == 0 {
		batch = DefaultBatchSize
	}
	log := cfg.Logger
	if log == nil {
		log = db.Driver().Logger()
	}
	log = log.With(slog.String("table", table.String()))
	return &Collector{db: db, dialect: d, plan: p, batch: batch, workers: workers, log: log, obs: db.Driver().Observer()}, nil
}

// describe completes p from the set's registration and the catalog, through q: the
// qualified names, the ID type and every reference. It fails with an
// *UnindexedError if a referencing column has no index.
func describe(ctx context.Context, q refset.Querier, d Dialect, p *Plan, reg schema.Registered) error {
	var err error
	p.IDColumn, p.registeredQueue = reg.IDColumn, reg.Queue.String()
	// Resolved once, here: the triggers must name the same tables in every
	// session, whatever its search path.
	for _, n := range []struct {
		to   *sqlident.Ident
		name sqlident.Ident
	}{{&p.Table, reg.Table}, {&p.Holds, reg.Holds}, {&p.Queue, reg.Queue}} {
		if *n.to, err = d.Qualify(ctx, q, n.name); err != nil {
			return err
		}
	}
	p.IDType, p.References, err = d.Describe(ctx, q, p.Table, reg.IDColumn)
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

// References are the foreign keys Install found, roots and edges.
func (c *Collector) References() []Reference { return append([]Reference(nil), c.plan.References...) }

// Collect deletes expired holds and every due object nothing references, batch by
// batch, until nothing is due, and returns what it did. Holds that expire, and
// entries that fall due, while it runs may wait for the next call. Each batch commits
// on its own: if ctx ends, what was done stays done, the rest waits for the next
// call, and Collect returns ctx's error with the stats of the batches that committed.
//
// An error that says the set's tables or columns are gone (dropped or renamed since
// Install) matches refset.ErrSchema, and one from a closed database refset.ErrClosed:
// no retry mends either. Other errors: refset.ErrConflict (after retries),
// ErrUnavailable, ErrTimeout, the context's error.
func (c *Collector) Collect(ctx context.Context) (_ Stats, err error) {
	defer func() { err = ctxerr.Wrap(ctx, err) }()
	start := time.Now()
	var (
		mu    sync.Mutex
		total Stats
		first error
		wg    sync.WaitGroup
		// holdsDone: a batch found fewer expired holds than it could take, so none
		// was left that another worker had not taken. Later batches skip the look:
		// holds that expire during this call wait for the next, as entries that fall
		// due during it may.
		holdsDone atomic.Bool
	)
	// workCtx also ends when one worker fails, to stop the others.
	workCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range c.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for workCtx.Err() == nil {
				expired, b, err := c.batchOnce(workCtx, !holdsDone.Load())
				if err == nil && expired < int64(c.batch) {
					holdsDone.Store(true)
				}
				mu.Lock()
				if err != nil {
					if first == nil {
						first = err
						cancel()
					}
					mu.Unlock()
					return
				}
				total.Batches++
				total.HoldsExpired += expired
				total.Reviewed += b.Reviewed
				total.Deleted += b.Deleted
				total.Postponed += b.Postponed
				total.Refused += b.Refused
				mu.Unlock()
				// Done when a batch found nothing due, or could only put what it found
				// back for later (objects busy or refused, which a short RetryDelay or
				// Grace may make due again at once): going on could review them again
				// and again. What else is due, the other workers or the next call take.
				if expired == 0 && b.Reviewed == b.Postponed+b.Refused {
					return
				}
			}
		}()
	}
	wg.Wait()
	total.Duration = time.Since(start)
	if first == nil {
		// The workers stopped between batches (or never began) because ctx ended: the
		// queue may not be done, and the caller must not read the stats as if it were.
		first = ctx.Err()
	}
	if first != nil {
		return total, fmt.Errorf("refset/cleanup: collect %s: %w", c.plan.Table, first)
	}
	level := slog.LevelDebug
	if total.Refused > 0 {
		// A reference Install does not know keeps these objects: run Install again.
		level = slog.LevelWarn
	}
	c.log.LogAttrs(ctx, level, "refset/cleanup: collected",
		slog.Int64("deleted", total.Deleted), slog.Int64("holds_expired", total.HoldsExpired),
		slog.Int64("reviewed", total.Reviewed), slog.Int64("postponed", total.Postponed),
		slog.Int64("refused", total.Refused), slog.Int("batches", total.Batches),
		slog.Duration("duration", total.Duration))
	c.obs.Collected(ctx, total.Deleted, total.HoldsExpired, total.Batches, total.Duration)
	return total, nil
}

// batchOnce runs one batch transaction: expired holds (when expire), then due
// entries.
func (c *Collector) batchOnce(ctx context.Context, expire bool) (expired int64, b Batch, err error) {
	err = refset.InTx(ctx, c.db, func(tx refset.Tx) error {
		var err error
		if expire {
			if expired, err = c.dialect.ExpireHolds(ctx, tx, &c.plan, c.batch); err != nil {
				return err
			}
		}
		b, err = c.dialect.CollectBatch(ctx, tx, &c.plan, c.batch)
		return err
	})
	return expired, b, c.schemaError(err)
}

// schemaError marks an error that says a table or column of the plan is gone as
// refset.ErrSchema, so callers (Run above all) can tell it from a passing failure.
func (c *Collector) schemaError(err error) error {
	if err != nil && !errors.Is(err, refset.ErrSchema) && c.dialect.SchemaError(err) {
		return fmt.Errorf("%w (was it dropped or changed since Install?): %w", refset.ErrSchema, err)
	}
	return err
}

// MaxFailedPasses is how many passes in a row may fail before a Run without onPass
// gives up and returns the last error: with no one to tell, a collector that fails
// on and on must stop rather than hide it. The passes are an interval apart, so a
// database that is unreachable for a moment does not stop it.
const MaxFailedPasses = 5

// Run collects every interval until ctx ends, then returns nil. A batch in flight
// when ctx ends rolls back; nothing is left half done.
//
// onPass, if not nil, is called after every pass with its result, for logging and
// metrics; it runs between passes, never inside a transaction, so a panic in it
// leaves nothing open (and goes on up through Run). With onPass, Run carries on
// through failing passes: the callback sees each, and may cancel ctx. Without it, Run
// returns the error of the MaxFailedPasses-th failed pass in a row.
//
// Either way Run returns at once on an error no retry mends: the database was closed
// (refset.ErrClosed) or the set's tables or columns are gone (refset.ErrSchema).
func (c *Collector) Run(ctx context.Context, interval time.Duration, onPass func(Stats, error)) error {
	if interval <= 0 {
		return fmt.Errorf("refset/cleanup: Run needs a positive interval, not %v", interval)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	failed := 0
	for {
		s, err := c.Collect(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if onPass != nil {
			onPass(s, err)
		}
		switch {
		case err == nil:
			failed = 0
		case errors.Is(err, refset.ErrClosed) || errors.Is(err, refset.ErrSchema):
			c.log.LogAttrs(ctx, slog.LevelError, "refset/cleanup: run stopped", slog.Any("error", err))
			return fmt.Errorf("refset/cleanup: run stopped: %w", err)
		default:
			failed++
			c.log.LogAttrs(ctx, slog.LevelWarn, "refset/cleanup: pass failed",
				slog.Int("failed_in_a_row", failed), slog.Any("error", err))
			if onPass == nil && failed == MaxFailedPasses {
				c.log.LogAttrs(ctx, slog.LevelError, "refset/cleanup: run stopped", slog.Any("error", err))
				return fmt.Errorf("refset/cleanup: run stopped after %d failed passes in a row, the last: %w", failed, err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Sweep is the full mark-and-sweep: it marks every object reachable from a root,
// queues the rest (objects still in their grace period keep it), and collects. Use
// it to repair a database whose queue was lost or that had objects before Install;
// its cost follows the size of the set. Errors: those of Collect.
func (c *Collector) Sweep(ctx context.Context) (queued int64, s Stats, err error) {
	defer func() { err = ctxerr.Wrap(ctx, err) }()
	err = refset.InTx(ctx, c.db, func(tx refset.Tx) error {
		var err error
		queued, err = c.dialect.EnqueueUnreachable(ctx, tx, &c.plan)
		return err
	})
	if err = c.schemaError(err); err != nil {
		return 0, s, fmt.Errorf("refset/cleanup: sweep %s: %w", c.plan.Table, err)
	}
	s, err = c.Collect(ctx)
	return queued, s, err
}

// Report is what Check found.
type Report struct {
	// Leaked counts objects reachable from no root and no queued object: garbage
	// Collect would never delete. Sweep repairs it.
	Leaked int64
	// Dangling counts reference rows whose object does not exist (possible only
	// where foreign keys were not enforced, such as a SQLite connection opened
	// without them).
	Dangling int64
	// Samples are a few of the offending IDs or rows, as text.
	Samples []string
}

// OK reports a healthy set.
func (r Report) OK() bool { return r.Leaked == 0 && r.Dangling == 0 }

// Check scans the set and its references. Its cost follows the size of the set: it
// is an audit, not part of collection. It reads the database's replica when it has
// one that shows every write committed before Check began, the primary otherwise
// (see onReplica). Errors: refset.ErrSchema, ErrUnavailable, ErrTimeout, ErrClosed,
// the context's error.
func (c *Collector) Check(ctx context.Context) (_ Report, err error) {
	defer func() { err = ctxerr.Wrap(ctx, err) }()
	var r Report
	err = onReplica(ctx, c.db, func(q refset.Querier) (err error) {
		r, err = c.check(ctx, q)
		return err
	})
	if err = c.readError(err); err != nil {
		return r, fmt.Errorf("refset/cleanup: check %s: %w", c.plan.Table, err)
	}
	return r, nil
}

// readError translates an error of a read on the database's reader, which no
// transaction of refset's translated.
func (c *Collector) readError(err error) error {
	if err == nil {
		return nil
	}
	return c.schemaError(c.db.TranslateError(err, ""))
}

// Holder is a row that keeps an object alive.
type Holder struct {
	Table  string // the referencing table
	Column string // its referencing column
	Key    string // the row's primary key, as "col=value, ..."
}

func (h Holder) String() string { return fmt.Sprintf("%s.%s (%s)", h.Table, h.Column, h.Key) }

// Why lists the rows that keep the object with that ID alive (up to whyLimit per
// referencing table; WhyAll lists them all). None means it is garbage: Collect will
// delete it once it is due. It reads where Check does. ErrNotFound if there is no
// such object; otherwise the errors of Check.
func (c *Collector) Why(ctx context.Context, id any) (_ []Holder, err error) {
	defer func() { err = ctxerr.Wrap(ctx, err) }()
	hs, err := c.whyOnReplica(ctx, refset.Arg(id), whyLimit)
	if err = c.readError(err); err != nil {
		return nil, fmt.Errorf("refset/cleanup: why %v: %w", id, err)
	}
	return hs, nil
}

// whyOnReplica is why, on the replica when it has caught up (onReplica).
func (c *Collector) whyOnReplica(ctx context.Context, id any, limit int) (hs []Holder, err error) {
	err = onReplica(ctx, c.db, func(q refset.Querier) (err error) {
		hs, err = c.why(ctx, q, id, limit)
		return err
	})
	return hs, err
}

// Name is the identifier of a trigger or function Install creates for p: derived from
// the queue and parts, so installing again replaces rather than adds, and short
// enough for Postgres whatever the table names.
func (p *Plan) Name(parts ...string) string {
	h := sha256.Sum256([]byte(p.registeredQueue + "\x00" + strings.Join(parts, "\x00")))
	return "refset_rv_" + hex.EncodeToString(h[:6])
}

// Roots are the references that keep objects alive by themselves; Edges lead from an
// object to the objects it keeps alive.
func (p *Plan) Roots() []Reference { return p.filter(false) }

// Edges: see Roots.
func (p *Plan) Edges() []Reference { return p.filter(true) }

func (p *Plan) filter(self bool) []Reference {
	var out []Reference
	for _, r := range p.References {
		if r.Self == self {
			out = append(out, r)
		}
	}
	return out
}
