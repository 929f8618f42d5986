package cleanup

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/refsetdb/refset/internal/ctxerr"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/schema"
	"github.com/refsetdb/refset/sqlident"
)

// This file holds what an operator reads about clean-up without changing anything:
// Inspect (a collector that installs no triggers), WhyAll, and Status. All of it runs
// outside any transaction: Inspect and Queue on the database's reader, WhyAll and
// Status where Check reads (onReplica).

// Inspect plans clean-up of cfg's set as Install does, from refset_sets and the
// catalog, but creates and replaces nothing: the triggers stay as the last Install
// left them. It exists for tools that only read (Check, Why, WhyAll): Install bakes
// cfg.Grace into the triggers, so a tool that installed with its own Config would
// change the grace period of the program that owns the set. Collect on an inspected
// collector works, and relies on the triggers an Install made.
//
// Errors: refset.ErrNotFound (no set registered on cfg.Table), refset.ErrInvalidIdentifier,
// ErrSchema for a key Install could not follow, ErrUnindexed as Install returns it,
// and the read errors of Check.
func Inspect(ctx context.Context, db refset.Database, d Dialect, cfg Config) (_ *Collector, err error) {
	defer func() { err = ctxerr.Wrap(ctx, err) }()
	c, err := newCollector(db, d, cfg)
	if err != nil {
		return nil, err
	}
	q := db.Reader()
	reg, err := schema.Lookup(ctx, q, d.Schema(), c.plan.Table)
	if err == nil {
		err = describe(ctx, q, d, &c.plan, reg)
	}
	if err != nil {
		if !errors.Is(err, ErrUnindexed) {
			err = c.readError(err)
		}
		return nil, fmt.Errorf("refset/cleanup: inspect %s: %w", cfg.Table, err)
	}
	return c, nil
}

// WhyAll is Why without its limit: every row that keeps the object alive, for an
// operator who must find them all before removing them. Its cost follows the number
// of such rows. It reads where Check does. Errors: those of Why.
func (c *Collector) WhyAll(ctx context.Context, id any) (_ []Holder, err error) {
	defer func() { err = ctxerr.Wrap(ctx, err) }()
	hs, err := c.whyOnReplica(ctx, refset.Arg(id), 0)
	if err = c.readError(err); err != nil {
		return nil, fmt.Errorf("refset/cleanup: why %v: %w", id, err)
	}
	return hs, nil
}

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
}

// ComponentVersion is a schema version refset_schema_version records: "core" for
// refset's own tables, "set:<table>" for a set's holds table and queue, and those of
// components built on refset (blockmanager).
type ComponentVersion struct {
	Component string
	Version   int
}

// DatabaseStatus is what Status read.
type DatabaseStatus struct {
	Now      time.Time // the database's clock, which expiry and review times follow
	Sets     []SetStatus
	Versions []ComponentVersion
}

// Status reads, for every set registered in the database, its objects, holds, and
// review queue, and the schema versions of every component. It writes nothing and
// installs nothing. Counting objects and holds scans them: it is an audit, not
// something to run every second on a large set. It reads where Check does. Errors:
// refset.ErrNotFound when the database has no refset tables; refset.ErrSchema when a
// set's table is gone; the read errors of Check.
func Status(ctx context.Context, db refset.Database, d Dialect) (_ DatabaseStatus, err error) {
	defer func() { err = ctxerr.Wrap(ctx, err) }()
	var s DatabaseStatus
	err = onReplica(ctx, db, func(q refset.Querier) (err error) {
		s, err = status(ctx, q, d)
		return err
	})
	if err != nil {
		if !errors.Is(err, refset.ErrNotFound) {
			err = (&Collector{db: db, dialect: d}).readError(err)
		}
		return DatabaseStatus{}, fmt.Errorf("refset/cleanup: status: %w", err)
	}
	return s, nil
}

// Clock is how a dialect keeps time in refset's tables: the database's clock as the
// tables store it (Now, an SQL expression), and how to read a stored time (Scan
// returns a destination for rows.Scan and the function that reads it after).
type Clock struct {
	Now  string
	Scan func() (dest any, read func() time.Time)
}

func status(ctx context.Context, q refset.Querier, d Dialect) (DatabaseStatus, error) {
	var s DatabaseStatus
	ck := d.Clock()
	found, err := d.SchemaSQL().TableExists(ctx, q, sqlident.Ident{Name: "refset_sets"})
	if err != nil {
		return s, err
	}
	if !found {
		return s, fmt.Errorf("%w: no refset tables (refset_sets) in this database: no store was built on it", refset.ErrNotFound)
	}
	dst, now := ck.Scan()
	if err := q.QueryRowContext(ctx, `SELECT `+ck.Now).Scan(dst); err != nil {
		return s, err
	}
	s.Now = now()

	var tables []string
	rows, err := q.QueryContext(ctx, `SELECT table_name FROM refset_sets ORDER BY table_name`)
	if err != nil {
		return s, err
	}
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			rows.Close()
			return s, err
		}
		tables = append(tables, t)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return s, err
	}
	for _, name := range tables {
		table, err := sqlident.Parse(name, true)
		if err != nil {
			return s, fmt.Errorf("refset_sets names %q: %w", name, err)
		}
		reg, err := schema.Lookup(ctx, q, d.Schema(), table)
		if err != nil {
			return s, err
		}
		st := SetStatus{Table: name}
		if err := q.QueryRowContext(ctx, `SELECT count(*) FROM `+table.Quoted()).Scan(&st.Objects); err != nil {
			return s, fmt.Errorf("%s: %w", table, err)
		}
		// The expiry and due comparisons are those ExpireHolds and CollectBatch make.
		err = q.QueryRowContext(ctx, fmt.Sprintf(`SELECT
			coalesce(sum(CASE WHEN expires_at IS NULL OR expires_at > %[1]s THEN 1 ELSE 0 END), 0),
			coalesce(sum(CASE WHEN expires_at <= %[1]s THEN 1 ELSE 0 END), 0)
			FROM %[2]s`, ck.Now, reg.Holds.Quoted())).Scan(&st.HoldsLive, &st.HoldsExpired)
		if err != nil {
			return s, fmt.Errorf("%s: %w", reg.Holds, err)
		}
		if st.Queued, st.Overdue, st.OldestDue, err = queueState(ctx, q, ck, reg.Queue); err != nil {
			return s, fmt.Errorf("%s: %w", reg.Queue, err)
		}
		s.Sets = append(s.Sets, st)
	}

	rows, err = q.QueryContext(ctx, `SELECT component, version FROM refset_schema_version ORDER BY component`)
	if err != nil {
		return s, err
	}
	for rows.Next() {
		var v ComponentVersion
		if err := rows.Scan(&v.Component, &v.Version); err != nil {
			rows.Close()
			return s, err
		}
		s.Versions = append(s.Versions, v)
	}
	return s, errors.Join(rows.Err(), rows.Close())
}

// queueState reads a review queue: its entries, those due now by the database's
// clock (the comparison CollectBatch makes), and the earliest review time (zero when
// the queue is empty).
func queueState(ctx context.Context, q refset.Querier, ck Clock, queue sqlident.Ident) (queued, overdue int64, oldest time.Time, err error) {
	dst, read := ck.Scan()
	err = q.QueryRowContext(ctx, fmt.Sprintf(`SELECT count(*),
		coalesce(sum(CASE WHEN review_after <= %[1]s THEN 1 ELSE 0 END), 0), min(review_after)
		FROM %[2]s`, ck.Now, queue.Quoted())).Scan(&queued, &overdue, dst)
	if err != nil {
		return 0, 0, time.Time{}, err
	}
	return queued, overdue, read(), nil
}

// Queue reads the set's review queue on the database's reader: depth is its entries,
// overdue those due now, which the next Collect reviews. Overdue that stays above zero
// between passes says clean-up lags. It is one scan of the queue, cheap enough for a
// metrics gauge. Errors: refset.ErrSchema when the queue is gone, and the read errors
// of Check.
func (c *Collector) Queue(ctx context.Context) (depth, overdue int64, err error) {
	defer func() { err = ctxerr.Wrap(ctx, err) }()
	depth, overdue, _, err = queueState(ctx, c.db.Reader(), c.dialect.Clock(), c.plan.Queue)
	if err = c.readError(err); err != nil {
		return 0, 0, fmt.Errorf("refset/cleanup: queue of %s: %w", c.plan.Table, err)
	}
	return depth, overdue, nil
}

// Table is the set's object table, as the collector names it in its errors and logs
// (qualified with its schema on Postgres): a label for its metrics.
func (c *Collector) Table() string { return c.plan.Table.String() }
