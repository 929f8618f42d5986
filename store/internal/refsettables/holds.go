package refsettables

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"
	"github.com/refsetdb/refset/store/internal/cleanupsql"
)

// holdsWhere is the filter f on a holds table, with its arguments. Every comparison
// with the time is the dialect's clock (refsetdriver.Clock.Now), the one clean-up expires
// holds by.
func holdsWhere(clock refsetdriver.Clock, f refsetdriver.HoldFilter) (string, []any) {
	var where []string
	var args []any
	if f.Expired {
		where = append(where, "expires_at <= "+clock.Now)
	}
	if f.Expiring {
		where = append(where, "expires_at > "+clock.Now)
	}
	if f.Holder != "" {
		where = append(where, "holder = ?")
		args = append(args, f.Holder)
	}
	if f.Object != nil {
		where = append(where, "object_id = ?")
		args = append(args, f.Object)
	}
	if len(where) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(where, " AND "), args
}

func (t Tables) ListHolds(ctx context.Context, q refset.Querier, holds sqlident.Ident, f refsetdriver.HoldFilter) (time.Time, []refsetdriver.Hold, error) {
	clock := t.clock
	nowDst, now := clock.Scan()
	if err := q.QueryRowContext(ctx, `SELECT `+clock.Now).Scan(nowDst); err != nil {
		return time.Time{}, nil, err
	}
	where, args := holdsWhere(clock, f)
	order := " ORDER BY object_id, holder"
	if f.Soonest {
		order = " ORDER BY expires_at, object_id, holder"
	}
	if f.Limit > 0 {
		order += fmt.Sprintf(" LIMIT %d", f.Limit)
	}
	list, err := cleanupsql.Rows(ctx, q, t.rebind(fmt.Sprintf(`SELECT holder, CAST(object_id AS TEXT), expires_at, created_at,
		CASE WHEN expires_at <= %s THEN 1 ELSE 0 END FROM %s%s%s`, clock.Now, holds.Quoted(), where, order)), args,
		func(rows *sql.Rows, h *refsetdriver.Hold) error {
			var expired int
			expDst, expires := clock.Scan()
			createdDst, created := clock.Scan()
			if err := rows.Scan(&h.Holder, &h.ObjectID, expDst, createdDst, &expired); err != nil {
				return err
			}
			h.ExpiresAt, h.CreatedAt, h.Expired = expires(), created(), expired == 1
			return nil
		})
	if err != nil {
		return time.Time{}, nil, err
	}
	return now(), list, nil
}

func (t Tables) DeleteExpiredHolds(ctx context.Context, tx refset.Tx, holds sqlident.Ident, holder string) (int64, error) {
	where, args := holdsWhere(t.clock, refsetdriver.HoldFilter{Expired: true, Holder: holder})
	return cleanupsql.Exec(ctx, tx, t.rebind(`DELETE FROM `+holds.Quoted()+where), args...)
}

// HolderCounts walks the holder index from one holder to the next (a loose index
// scan, which neither database makes of DISTINCT by itself), counting each one's
// holds in a subquery that stops after most+1.
func (t Tables) HolderCounts(ctx context.Context, q refset.Querier, holds sqlident.Ident, limit, most int) ([]refsetdriver.HolderCount, error) {
	h := holds.Quoted()
	return cleanupsql.Rows(ctx, q, t.rebind(fmt.Sprintf(`WITH RECURSIVE holders(holder, n) AS (
		SELECT (SELECT min(holder) FROM %[1]s), 1
		UNION ALL
		SELECT (SELECT min(holder) FROM %[1]s WHERE holder > holders.holder), n + 1 FROM holders
		WHERE holders.holder IS NOT NULL AND n < %[2]d)
	SELECT holder, (SELECT count(*) FROM (SELECT 1 FROM %[1]s x WHERE x.holder = holders.holder LIMIT %[3]d) c)
	FROM holders WHERE holder IS NOT NULL ORDER BY holder`, h, limit, most+1)), nil,
		func(rows *sql.Rows, c *refsetdriver.HolderCount) error { return rows.Scan(&c.Holder, &c.Holds) })
}
