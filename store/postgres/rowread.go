package postgres

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"
	"github.com/refsetdb/refset/refsetdriver"
)

// errNotPgx is a connection of a pool whose driver said it was pgx's, but is not.
var errNotPgx = errors.New("refset/postgres: the pool's connection is not pgx's")

// pgxRowRead is the refsetdriver.RowReader of a database opened on pgx: a lookup by key runs
// on the pool's connection itself (sql.Conn.Raw), in the connection's own query mode
// (prepared once per connection through pgx's statement cache, or unnamed in one
// round trip with Options.Unprepared), and pgx scans the row straight into the
// caller's fields. It declines a closed database and a pool that is not pgx's (a
// replica of the caller's on lib/pq), which database/sql then reads as before.
func (db *DB) pgxRowRead(ctx context.Context, pool any, query string, args []any, scan func(refsetdriver.Row) error) (ran, found bool, err error) {
	var p *sql.DB
	switch q := pool.(type) {
	case *sqlx.DB:
		p = q.DB
	case *sql.DB:
		p = q
	}
	if p == nil || db.Closed() {
		return false, false, nil
	}
	if _, ok := p.Driver().(*stdlib.Driver); !ok {
		return false, false, nil
	}
	conn, err := p.Conn(ctx)
	if err != nil {
		return true, false, err
	}
	defer conn.Close()
	err = conn.Raw(func(dc any) error {
		c := pgxConnOf(dc) // stdlib's, or Open's guard around it (conns.go)
		if c == nil {
			return errNotPgx
		}
		settleRaw(ctx, dc)
		rows, err := c.Query(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		if rows.Next() {
			found = true
			if err := scan(rows); err != nil {
				return err
			}
		}
		rows.Close()
		return rows.Err()
	})
	return true, found, err
}
