package cleanup

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/refsetdb/refset/internal/ctxerr"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"
)

// This file is the report on a whole database, Status: every set's clean-up and the
// schema versions. Like the reports on one set, it changes nothing, and its reads are
// the dialect's.

// SetStatus is the state of one set's clean-up, by the database's clock: its table,
// its counts (SetState: objects, holds, review queue, oldest review time, objects
// collected) and what Report would say of its undeclared parts. Its counts of rows
// are exact up to the cap Status counted to (StatusOptions.Cap), estimates past it
// (Count). A OldestDue before DatabaseStatus.Now says how long collection has lagged;
// the rise of Collected between two reads is the rate of collection.
type SetStatus struct {
	Table string // the object table, as its store registered it
	SetState
	// UndeclaredParts describes the keys to the set declared ON DELETE CASCADE from
	// tables that no Install declared as parts (Config.Parts): see Report.
	UndeclaredParts []string
}

// SetState is a set's counts, as one statement reads them for every set.
type SetState = refsetdriver.SetState

// Waiting is the entries of the queue not yet due.
func (s SetStatus) Waiting() Count { return s.Queued.Minus(s.Overdue.N) }

// Count is a number of rows as Status read it: N rows (Exact), about N by the
// database's statistics (Estimated), or more than N when it has none (MoreThan).
type Count = refsetdriver.Count

// Accuracy says what a Count's number is.
type Accuracy = refsetdriver.Accuracy

// The accuracies of a Count.
const (
	Exact     = refsetdriver.Exact
	Estimated = refsetdriver.Estimated
	MoreThan  = refsetdriver.MoreThan
)

// DefaultCountCap is the number of rows Status counts in a table before it takes the
// database's estimate instead: a few milliseconds of reading, whatever the table's
// size.
const DefaultCountCap = 10_000

// StatusOptions are how Status, a Counter and Collector.QueueCounts count.
type StatusOptions struct {
	// Cap is the number of rows each count reads at most in the object table, the
	// holds table and the review queue (0: DefaultCountCap). Past it, the count is
	// the database's estimate from its statistics (PostgreSQL's planner's, scaled to
	// the table's size now; SQLite's from its last ANALYZE), marked Estimated, or,
	// without statistics, "more than Cap" (MoreThan). The expired holds and the
	// entries due now are counted exactly whatever Cap, over the range of their
	// index: as many rows as clean-up has yet to do.
	Cap int64
	// Exact counts every row of every table: it reads each whole, as an audit may
	// need, and its cost follows the size of the sets.
	Exact bool
}

// check refuses a negative Cap.
func (o StatusOptions) check(op string) error {
	if o.Cap < 0 {
		return fmt.Errorf("refset/cleanup: %s: %w: StatusOptions.Cap %d is negative", op, refset.ErrInvalidConfig, o.Cap)
	}
	return nil
}

func (o StatusOptions) cap() int64 {
	switch {
	case o.Exact:
		return 0
	case o.Cap <= 0:
		return DefaultCountCap
	}
	return o.Cap
}

// ComponentVersion is a schema version refset's records keep: "core" for refset's
// own tables, "set:<table>" for a set's holds table and queue, and those of
// components built on refset (blockmanager).
type ComponentVersion = refsetdriver.Version

// DatabaseStatus is what Status read.
type DatabaseStatus struct {
	Now      time.Time // the database's clock, which expiry and review times follow
	Sets     []SetStatus
	Versions []ComponentVersion
}

// Status is StatusWith's default: counts capped at DefaultCountCap.
func Status(ctx context.Context, db refset.Database) (DatabaseStatus, error) {
	return StatusWith(ctx, db, StatusOptions{})
}

// StatusWith reads, for every set registered in db (a database of store/sqlite or
// store/postgres), its objects, holds, review queue and objects collected, and the
// schema versions of every component. It writes nothing and installs nothing. Its
// counts read no table whole unless opts ask for Exact: each stops at opts' cap (see
// StatusOptions), so Status costs about the same on a set of a million objects as on
// one of a thousand. It reads where Check does. Errors: refset.ErrNotFound when the
// database has no refset tables; refset.ErrSchema when a set's table is gone;
// refset.ErrInvalidConfig for a database of no store or a negative Cap; the read
// errors of Check.
func StatusWith(ctx context.Context, db refset.Database, opts StatusOptions) (DatabaseStatus, error) {
	if err := opts.check("status"); err != nil {
		return DatabaseStatus{}, err
	}
	c := NewCounter(db, opts)
	return onDatabase(ctx, db, "status", func(ctx context.Context, q refset.Querier, d refsetdriver.Driver) (DatabaseStatus, error) {
		s, err := c.read(ctx, q, d, true)
		if err != nil {
			return s, err
		}
		for i := range s.Sets {
			table, err := sqlident.Parse(s.Sets[i].Table, true)
			if err != nil {
				return s, fmt.Errorf("refset_sets names %q: %w", s.Sets[i].Table, err)
			}
			if s.Sets[i].UndeclaredParts, err = undeclaredOf(ctx, q, d, table); err != nil {
				return s, err
			}
		}
		s.Versions, err = d.Versions(ctx, q)
		return s, err
	})
}

// onDatabase runs read, a report on the whole database, where Status reads, and
// types its errors as Status does; op names the report in them.
func onDatabase(ctx context.Context, db refset.Database, op string,
	read func(context.Context, refset.Querier, refsetdriver.Driver) (DatabaseStatus, error)) (_ DatabaseStatus, err error) {
	defer func() { err = ctxerr.Wrap(ctx, err) }()
	d, err := refsetdriver.Of(db)
	if err != nil {
		return DatabaseStatus{}, err
	}
	s, err := onReplica(ctx, db, func(q refset.Querier) (DatabaseStatus, error) { return read(ctx, q, d) })
	if err != nil {
		if !errors.Is(err, refset.ErrNotFound) {
			err = (&Collector{db: db, dialect: d}).readError(err)
		}
		return DatabaseStatus{}, fmt.Errorf("refset/cleanup: %s: %w", op, err)
	}
	return s, nil
}

// Counts is Status without its reads of the catalog and the schema versions: the
// database's clock and every set's counts (UndeclaredParts and Versions are left
// empty). It reads where Status does. A program that asks often (a console's
// sampler) keeps a Counter instead, which reads the list of sets once in a while
// and the counts in one statement. Errors: those of Status.
func Counts(ctx context.Context, db refset.Database) (DatabaseStatus, error) {
	return NewCounter(db, StatusOptions{}).Counts(ctx)
}

// CounterRefresh is how long a Counter uses the list of sets it read before it
// reads it again.
const CounterRefresh = time.Minute

// A Counter reads the counts of Counts, as often as it is asked: one statement for
// every set (the database's clock, each set's objects, holds, queue, entries due,
// oldest review and objects collected), each count bounded as StatusOptions say.
// It reads the list of sets, and what it needs of the catalog, when first asked,
// then once every CounterRefresh, and again after a read that failed, so that a
// set built since appears within that time. A Counter is safe for concurrent use.
type Counter struct {
	db   refset.Database
	opts StatusOptions

	mu      sync.Mutex
	tables  []string
	counter refsetdriver.SetCounter
	made    time.Time
}

// NewCounter returns a Counter of the sets of db.
func NewCounter(db refset.Database, opts StatusOptions) *Counter {
	return &Counter{db: db, opts: opts}
}

// Counts reads the counts of every set. Errors: those of StatusWith.
func (c *Counter) Counts(ctx context.Context) (DatabaseStatus, error) {
	if err := c.opts.check("counts"); err != nil {
		return DatabaseStatus{}, err
	}
	return onDatabase(ctx, c.db, "counts", func(ctx context.Context, q refset.Querier, d refsetdriver.Driver) (DatabaseStatus, error) {
		return c.read(ctx, q, d, false)
	})
}

// read reads the counts on q; fresh reads the list of sets first, whatever its age.
func (c *Counter) read(ctx context.Context, q refset.Querier, d refsetdriver.Driver, fresh bool) (DatabaseStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var s DatabaseStatus
	if fresh || c.counter == nil || time.Since(c.made) > CounterRefresh {
		if err := c.prepare(ctx, q, d); err != nil {
			return s, err
		}
	}
	now, states, err := c.counter.Read(ctx, q)
	if err != nil {
		c.counter = nil // a set dropped, a table renamed: read the list again
		return s, err
	}
	s.Now = now
	for i, st := range states {
		s.Sets = append(s.Sets, SetStatus{Table: c.tables[i], SetState: st})
	}
	return s, nil
}

// prepare reads the list of sets and has the dialect write the statement that
// counts them.
func (c *Counter) prepare(ctx context.Context, q refset.Querier, d refsetdriver.Driver) error {
	c.counter = nil
	tables, err := d.Sets(ctx, q)
	if err != nil {
		return err
	}
	regs := make([]refsetdriver.Registered, 0, len(tables))
	for _, name := range tables {
		table, err := sqlident.Parse(name, true)
		if err != nil {
			return fmt.Errorf("refset_sets names %q: %w", name, err)
		}
		reg, err := d.SchemaSQL().Lookup(ctx, q, table)
		if err != nil {
			return err
		}
		regs = append(regs, reg)
	}
	counter, err := d.Counter(ctx, q, regs, c.opts.cap(), refsetdriver.EveryCount)
	if err != nil {
		return err
	}
	c.tables, c.counter, c.made = tables, counter, time.Now()
	return nil
}

// undeclaredOf describes the cascading keys to the set on table that no Install
// declared as parts.
func undeclaredOf(ctx context.Context, q refset.Querier, d refsetdriver.Driver, table sqlident.Ident) ([]string, error) {
	c := &Collector{dialect: d, plan: &refsetdriver.Plan{Table: table}}
	if _, err := locate(ctx, q, d, c.plan); err != nil {
		return nil, err
	}
	parts, err := c.readParts(ctx, q, c.plan)
	return undeclaredParts(c.plan, parts), err
}
