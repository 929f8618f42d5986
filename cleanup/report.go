package cleanup

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/refsetdb/refset/refset"
)

// check counts, on q, the objects reachable from no root and no queued object, and
// the reference rows whose object does not exist, with a few samples of each.
func (c *Collector) check(ctx context.Context, q refset.Querier) (Report, error) {
	var r Report
	p, d := &c.plan, c.dialect
	id := fmt.Sprintf(`o."%s"`, p.IDColumn)
	rows, err := q.QueryContext(ctx, d.Reach(p, true)+fmt.Sprintf(`
		SELECT %s, count(*) OVER () FROM %s o
		WHERE NOT EXISTS (SELECT 1 FROM reach WHERE reach.id = %s) LIMIT 5`, d.Text(id), p.Table.Quoted(), id))
	if err != nil {
		return r, err
	}
	for rows.Next() {
		var sample string
		if err := rows.Scan(&sample, &r.Leaked); err != nil {
			rows.Close()
			return r, err
		}
		r.Samples = append(r.Samples, "leaked "+sample)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return r, err
	}
	for _, ref := range p.References {
		col := fmt.Sprintf(`r."%s"`, ref.Column)
		var n int64
		var sample sql.NullString
		err := q.QueryRowContext(ctx, fmt.Sprintf(`SELECT count(*), min(%s) FROM %s r
			WHERE %s IS NOT NULL AND NOT EXISTS (SELECT 1 FROM %s o WHERE %s = %s)`,
			d.Text(col), ref.Table.Quoted(), col, p.Table.Quoted(), id, col)).Scan(&n, &sample)
		if err != nil {
			return r, err
		}
		r.Dangling += n
		if sample.Valid {
			r.Samples = append(r.Samples, fmt.Sprintf("dangling %s -> %s", ref, sample.String))
		}
	}
	return r, nil
}

// whyLimit is how many rows per referencing table Why lists.
const whyLimit = 5

// why lists, on q, up to limit rows (0: all of them) per referencing table that
// reference id, each named by its primary key (or its row address, for a table
// without one).
func (c *Collector) why(ctx context.Context, q refset.Querier, id any, limit int) ([]Holder, error) {
	p, d := &c.plan, c.dialect
	rebind := d.Schema().Rebind
	var one int
	err := q.QueryRowContext(ctx, rebind(fmt.Sprintf(`SELECT 1 FROM %s WHERE "%s" = ?`, p.Table.Quoted(), p.IDColumn)), id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("no object %v in %s: %w", id, p.Table, refset.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	var hs []Holder
	for _, r := range p.References {
		var parts []string
		for _, k := range r.Key {
			parts = append(parts, fmt.Sprintf(`'%s=' || %s`, k, d.Text(`"`+k+`"`)))
		}
		if len(parts) == 0 {
			parts = []string{`'row=' || ` + d.Text(d.RowAddress())}
		}
		query := fmt.Sprintf(`SELECT %s FROM %s WHERE "%s" = ?`, strings.Join(parts, ` || ', ' || `), r.Table.Quoted(), r.Column)
		if limit > 0 {
			query += fmt.Sprintf(` LIMIT %d`, limit)
		}
		rows, err := q.QueryContext(ctx, rebind(query), id)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			h := Holder{Table: r.Table.String(), Column: r.Column}
			if err := rows.Scan(&h.Key); err != nil {
				rows.Close()
				return nil, err
			}
			hs = append(hs, h)
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return nil, err
		}
	}
	return hs, nil
}
