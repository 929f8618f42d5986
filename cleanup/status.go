package cleanup

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/refsetdb/refset/internal/ctxerr"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"
)

// This file is the report on a whole database, Status: every set's clean-up and the
// schema versions. Like the reports on one set, it changes nothing, and its reads are
// the dialect's.

// SetStatus is the state of one set's clean-up, by the database's clock.
type SetStatus struct {
	Table        string // the object table, as its store registered it
	Objects      int64  // rows in the object table
	HoldsLive    int64  // holds without expiry or expiring later
	HoldsExpired int64  // holds past their expiry that Collect has not removed yet
	Queued       int64  // entries in the review queue
	Overdue      int64  // entries due now: what the next Collect reviews
	// OldestDue is the earliest review time in the queue (zero when the queue is
	// empty). Before DatabaseStatus.Now it says how long collection has lagged.
	OldestDue time.Time
	// UndeclaredParts describes the keys to the set declared ON DELETE CASCADE from
	// tables that no Install declared as parts (Config.Parts): see Report.
	UndeclaredParts []string
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

// Status reads, for every set registered in db (a database of store/sqlite or
// store/postgres), its objects, holds, and review queue, and the schema versions of
// every component. It writes nothing and installs nothing. Counting objects and
// holds scans them: it is an audit, not something to run every second on a large
// set. It reads where Check does. Errors: refset.ErrNotFound when the database has no
// refset tables; refset.ErrSchema when a set's table is gone; refset.ErrInvalidConfig
// for a database of no store; the read errors of Check.
func Status(ctx context.Context, db refset.Database) (DatabaseStatus, error) {
	return onDatabase(ctx, db, "status", status)
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

func status(ctx context.Context, q refset.Querier, d refsetdriver.Driver) (DatabaseStatus, error) {
	s, err := counts(ctx, q, d)
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
}

// Counts is Status without its reads of the catalog and the schema versions: the
// database's clock and every set's counts (UndeclaredParts and Versions are left
// empty). It reads where Status does, and costs what Status's counts cost: a
// console's sampler calls it every few seconds. Errors: those of Status.
func Counts(ctx context.Context, db refset.Database) (DatabaseStatus, error) {
	return onDatabase(ctx, db, "counts", counts)
}

func counts(ctx context.Context, q refset.Querier, d refsetdriver.Driver) (DatabaseStatus, error) {
	var s DatabaseStatus
	tables, err := d.Sets(ctx, q)
	if err != nil {
		return s, err
	}
	if s.Now, err = d.Now(ctx, q); err != nil {
		return s, err
	}
	for _, name := range tables {
		table, err := sqlident.Parse(name, true)
		if err != nil {
			return s, fmt.Errorf("refset_sets names %q: %w", name, err)
		}
		reg, err := d.SchemaSQL().Lookup(ctx, q, table)
		if err != nil {
			return s, err
		}
		st, err := d.SetState(ctx, q, reg)
		if err != nil {
			return s, err
		}
		s.Sets = append(s.Sets, SetStatus{Table: name, Objects: st.Objects, HoldsLive: st.HoldsLive,
			HoldsExpired: st.HoldsExpired, Queued: st.Queued, Overdue: st.Overdue, OldestDue: st.OldestDue})
	}
	return s, nil
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
