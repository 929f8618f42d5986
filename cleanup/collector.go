package cleanup

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
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
	// Zero means DefaultGrace; it is kept in whole milliseconds, and one below a
	// millisecond is one.
	Grace time.Duration
	// BatchSize bounds the queue entries (and expired holds) one transaction handles,
	// and the objects it deletes: the garbage it claimed and what that alone kept
	// alive along the edges (the blocks of an abandoned chain). Zero means
	// DefaultBatchSize.
	BatchSize int
	// RetryDelay is how far an object is postponed when another transaction held a
	// lock on it during its review. Zero means DefaultRetryDelay.
	RetryDelay time.Duration
	// Workers is how many batches one Collect call runs at most at once, each in its
	// own transaction; entries one has claimed the others skip. A Collect starts with
	// one, and starts another only when a batch came back full, so a queue with
	// little due costs a batch or two whatever Workers is. Zero means 2. (SQLite has
	// one writer, so there they take turns.)
	Workers int
	// Parts names the tables whose foreign keys to the set are declared ON DELETE
	// CASCADE on purpose: their rows are parts of the object (a block's list of
	// batches), deleted with it, and keep nothing alive. Any other cascading key to
	// the set is taken for a mistake (a holder meant to be RESTRICT, whose objects
	// clean-up would delete under it): Install warns of it, every time, and Check
	// reports it (Report.UndeclaredParts); with RefuseUndeclaredParts, Install
	// refuses it. Names are written as in Table (schema-qualified or not). Install
	// keeps them in the database, so that a tool that only reads (Inspect, the
	// refset command) knows them too; a later Install adds its own to them. The set's
	// holds table is never a part.
	Parts []string
	// RefuseUndeclaredParts makes Install (and a Collect that follows a new key)
	// fail with refset.ErrSchema, naming the key, when a cascading key to the set
	// comes from a table Parts does not name, instead of warning.
	RefuseUndeclaredParts bool
	// Logger receives each Collect's result (debug; a warning when objects were
	// refused), Run's failed passes (warn) and why Run stopped (error). Nil means the
	// database's logger (the stores' Options.Logger), if any.
	Logger *slog.Logger
}

// Reference is one FOREIGN KEY that points at the set's ID column (see References).
// The stores' catalog reads make it, so it is declared with them.
type Reference = refsetdriver.Reference

// Collector collects the garbage of one set. It is safe for concurrent use, and
// several collectors, in one process or many, may work on one set at once.
type Collector struct {
	db      refset.Database
	dialect refsetdriver.Driver
	batch   int
	workers int
	log     *slog.Logger
	obs     refset.Observer
	table   sqlident.Ident // Config.Table, as written: the name the set is registered under
	parts   []string       // Config.Parts, as written
	strict  bool           // Config.RefuseUndeclaredParts

	mu sync.Mutex
	// plan is what the collector knows of the set. Once published it is never
	// changed: a Collect that follows a new key (follow) publishes a new one, and a
	// batch keeps the one it started with.
	plan *refsetdriver.Plan
	// unfollowed is why the last attempt to follow the catalog failed (an
	// *UnindexedError, a key Install refuses), or nil: while it is set, Collect tries
	// again before it collects, and refuses as Install does.
	unfollowed error
}

// replan is a copy of the current plan to complete from the catalog again (describe):
// it knows the set's table by the name it is registered under.
func (c *Collector) replan() *refsetdriver.Plan {
	p := c.current().Clone()
	p.Table = c.table
	return p
}

// current is the plan the collector works with now (an empty one on a zero
// Collector, which made refuses to work with).
func (c *Collector) current() *refsetdriver.Plan {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.plan == nil {
		return &refsetdriver.Plan{}
	}
	return c.plan
}

// newCollector checks cfg and fills in its defaults: a Collector, on db's clean-up
// dialect, whose plan knows only its table and times until describe completes it.
func newCollector(db refset.Database, cfg Config) (*Collector, error) {
	d, err := refsetdriver.Of(db)
	if err != nil {
		return nil, err
	}
	table, err := sqlident.Parse(cfg.Table, true)
	if err != nil {
		return nil, err
	}
	if cfg.Grace < 0 || cfg.BatchSize < 0 || cfg.RetryDelay < 0 || cfg.Workers < 0 {
		return nil, fmt.Errorf("refset/cleanup: %w: negative Grace, BatchSize, RetryDelay or Workers in %+v", refset.ErrInvalidConfig, cfg)
	}
	if cfg.Grace > 0 && cfg.Grace < time.Millisecond {
		// The trigger keeps the grace in whole milliseconds: it would install 0,
		// which reads as no grace installed.
		cfg.Grace = time.Millisecond
	}
	p := &refsetdriver.Plan{Table: table, Grace: cmp.Or(cfg.Grace, DefaultGrace), RetryDelay: cmp.Or(cfg.RetryDelay, DefaultRetryDelay)}
	log := cmp.Or(cfg.Logger, d.Logger()).With(slog.String("table", table.String()))
	for _, part := range cfg.Parts {
		if _, err := sqlident.Parse(part, true); err != nil {
			return nil, fmt.Errorf("refset/cleanup: part table: %w", err)
		}
	}
	return &Collector{db: db, dialect: d, plan: p, batch: cmp.Or(cfg.BatchSize, DefaultBatchSize), workers: cmp.Or(cfg.Workers, 2),
		log: log, obs: d.Observer(), table: table, parts: cfg.Parts, strict: cfg.RefuseUndeclaredParts}, nil
}

// References are the foreign keys the collector follows, roots and edges: those
// Install found, and those a Collect followed since (Stats.Followed).
func (c *Collector) References() []Reference {
	if c == nil {
		return nil
	}
	return append([]Reference(nil), c.current().References...)
}

// Table is the set's object table, as the collector names it in its errors and logs
// (qualified with its schema on Postgres): a label for its metrics.
func (c *Collector) Table() string {
	if c == nil {
		return ""
	}
	return c.current().Table.String()
}

// made fails op on a Collector that Install or Inspect did not make (the zero value, or
// nil), which has no database to work on: a typed error rather than a nil pointer's
// panic.
func (c *Collector) made(op string) error {
	if c == nil || c.db == nil {
		return fmt.Errorf("refset/cleanup: %s: %w: the Collector was not made by cleanup.Install, cleanup.Inspect or store.NewCollector", op, refset.ErrInvalidConfig)
	}
	return nil
}

// schemaError marks an error that says a table or column of the plan is gone as
// refset.ErrSchema, so callers (Run above all) can tell it from a passing failure.
func (c *Collector) schemaError(err error) error {
	if err != nil && !errors.Is(err, refset.ErrSchema) && c.dialect.SchemaError(err) {
		return fmt.Errorf("%w (was it dropped or changed since Install?): %w", refset.ErrSchema, err)
	}
	return err
}

// readError translates an error of a read on the database's reader, which no
// transaction of refset's translated (nil stays nil).
func (c *Collector) readError(err error) error {
	return c.schemaError(c.db.TranslateError(err, ""))
}
