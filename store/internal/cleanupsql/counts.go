package cleanupsql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"
)

// This file is the SQL of the counts refset status prints and a console samples:
// every set's in one statement, none of which reads a whole table unless asked to
// (cap 0), and the count of objects collected, which clean-up keeps in
// refset_collected.

// Estimate is the SQL expression of the database's estimate of the rows of a table
// (NULL when it has none), with its arguments.
type Estimate func(table sqlident.Ident) (expr string, args []any)

// collectedSince is the core schema version that added refset_collected
// (0002_collected.sql).
const collectedSince = 2

// CountsCollected: see refsetdriver.CleanupDialect.
func (r Reports[F]) CountsCollected(ctx context.Context, q refset.Querier) (bool, error) {
	v, err := r.fragments().SchemaSQL().Version(ctx, q, "core")
	return v >= collectedSince, err
}

// AddCollected: see refsetdriver.CleanupDialect. One upsert of the set's row per
// batch that deleted objects: the row lock it takes is held to the batch's commit,
// which follows at once, so collectors of one set queue there only for that.
func (r Reports[F]) AddCollected(ctx context.Context, tx refset.Tx, p *refsetdriver.Plan, n int64) error {
	if !p.Collected || n == 0 {
		return nil
	}
	_, err := tx.ExecContext(ctx, r.fragments().Rebind(`INSERT INTO refset_collected (table_name, collected) VALUES (?, ?)
		ON CONFLICT (table_name) DO UPDATE SET collected = refset_collected.collected + excluded.collected`),
		p.RegisteredTable, n)
	return err
}

// Counter: see refsetdriver.CleanupDialect. The statement is a UNION ALL of one row
// per set, each count a subquery: a table's rows counted up to cap+1 (a scan that a
// LIMIT stops) beside the database's estimate, which stands in for the count past
// cap; the expired holds and the entries due now counted over their index's range
// (as many as clean-up has yet to do); the oldest review time, the first entry of
// that index; the objects collected, from refset_collected. The counts what leaves
// out are constants in the row, which Read reads as every row.
func (r Reports[F]) Counter(ctx context.Context, q refset.Querier, regs []refsetdriver.Registered, cap int64, what refsetdriver.Counted) (refsetdriver.SetCounter, error) {
	f := r.fragments()
	c := counter{clock: f.Clock(), sets: len(regs), cap: cap}
	if len(regs) == 0 {
		c.query = `SELECT ` + c.clock.Now
		return c, nil
	}
	every := what == refsetdriver.EveryCount
	var collected bool
	var err error
	if every {
		if collected, err = r.CountsCollected(ctx, q); err != nil {
			return nil, err
		}
	}
	estimate := func(sqlident.Ident) (string, []any) { return "NULL", nil }
	if cap > 0 {
		if estimate, err = f.Estimator(ctx, q); err != nil {
			return nil, err
		}
	}
	var selects []string
	for i, reg := range regs {
		var cols []string
		col := func(expr string, args ...any) {
			cols = append(cols, expr)
			c.args = append(c.args, args...)
		}
		counted := func(table sqlident.Ident) {
			if cap > 0 {
				col(fmt.Sprintf(`(SELECT count(*) FROM (SELECT 1 FROM %s LIMIT %d) s)`, table.Quoted(), cap+1))
			} else {
				col(`(SELECT count(*) FROM ` + table.Quoted() + `)`)
			}
			expr, args := estimate(table)
			col(expr, args...)
		}
		col(fmt.Sprint(i))
		col(c.clock.Now)
		if every {
			counted(reg.Table)
			counted(reg.Holds)
			// The comparisons are those of ExpireHolds and CollectBatch.
			col(fmt.Sprintf(`(SELECT count(*) FROM %s WHERE expires_at <= %s)`, reg.Holds.Quoted(), c.clock.Now))
		} else {
			col(`0, NULL, 0, NULL, 0`) // objects, holds and expired holds: not counted
		}
		counted(reg.Queue)
		col(fmt.Sprintf(`(SELECT count(*) FROM %s WHERE review_after <= %s)`, reg.Queue.Quoted(), c.clock.Now))
		col(`(SELECT min(review_after) FROM ` + reg.Queue.Quoted() + `)`)
		if collected {
			col(`coalesce((SELECT collected FROM refset_collected WHERE table_name = ?), 0)`, reg.Table.String())
		} else {
			col(`0`)
		}
		selects = append(selects, `SELECT `+strings.Join(cols, ", "))
	}
	c.query = f.Rebind(strings.Join(selects, "\nUNION ALL "))
	return c, nil
}

// counter is a statement Counter wrote.
type counter struct {
	query string
	args  []any
	clock refsetdriver.Clock
	sets  int
	cap   int64
}

func (c counter) Read(ctx context.Context, q refset.Querier) (time.Time, []refsetdriver.SetState, error) {
	if c.sets == 0 {
		dst, now := c.clock.Scan()
		err := q.QueryRowContext(ctx, c.query).Scan(dst)
		return now(), nil, err
	}
	var now time.Time
	states := make([]refsetdriver.SetState, c.sets)
	rows, err := q.QueryContext(ctx, c.query, c.args...)
	if err != nil {
		return now, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			i                                     int
			objects, holds, expired, queued, over int64
			objectsEst, holdsEst, queuedEst       sql.NullInt64
			collected                             int64
		)
		nowDst, readNow := c.clock.Scan()
		oldestDst, readOldest := c.clock.Scan()
		if err := rows.Scan(&i, nowDst, &objects, &objectsEst, &holds, &holdsEst, &expired,
			&queued, &queuedEst, &over, oldestDst, &collected); err != nil {
			return now, nil, err
		}
		if i < 0 || i >= c.sets {
			return now, nil, fmt.Errorf("counts: row %d of %d sets", i, c.sets)
		}
		now = readNow()
		s := &states[i]
		s.Objects = c.count(objects, objectsEst)
		s.HoldsExpired = refsetdriver.Count{N: expired}
		s.HoldsLive = c.count(holds, holdsEst).Minus(expired)
		s.Overdue = refsetdriver.Count{N: over}
		// The entries due now are a count: the queue has at least as many, whatever
		// older statistics say.
		s.Queued = c.count(queued, queuedEst)
		switch s.Queued.Accuracy {
		case refsetdriver.Estimated:
			s.Queued.N = max(s.Queued.N, over)
		case refsetdriver.MoreThan:
			s.Queued.N = max(s.Queued.N, over-1)
		}
		s.OldestDue, s.Collected = readOldest(), collected
	}
	return now, states, rows.Err()
}

// count is a table's rows as Read reports them: n, counted up to cap+1, or past
// cap the estimate, when there is one above cap (a lower one is out of date).
func (c counter) count(n int64, estimate sql.NullInt64) refsetdriver.Count {
	if c.cap == 0 || n <= c.cap {
		return refsetdriver.Count{N: n}
	}
	if estimate.Valid && estimate.Int64 > c.cap {
		return refsetdriver.Count{N: estimate.Int64, Accuracy: refsetdriver.Estimated}
	}
	return refsetdriver.Count{N: c.cap, Accuracy: refsetdriver.MoreThan}
}
