package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jmoiron/sqlx"
	"github.com/refsetdb/refset/internal/sentinel"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
)

// A statement that commits on its own (outside any transaction: custody's payments)
// and whose connection is lost once it was sent may have committed, or may still:
// its backend may be running it, or may not have read it yet. refset settles it
// (refsetdriver.OwnCommits) instead of leaving the caller ErrCommitUnknown:
//
//  1. The statement runs on a *sql.Conn, which database/sql never runs a statement
//     on again, and refset knows that connection's server session (backendID: its
//     backend's pid and start time, asked once per connection).
//  2. After the loss, on a primary (a transaction that takes an id, which a standby
//     refuses), the session is ended if it is still there: pg_terminate_backend waits
//     until the backend is gone. A backend running the statement then rolls it back,
//     one committing it finishes first, and one that had not read it never will. The
//     pid is matched with its start time, so no other session that took the pid
//     since is ended. On a server where the session is not (another primary after a
//     failover, the same one restarted) the statement can no longer commit either.
//  3. In the same transaction, with a snapshot taken after that, the caller's own
//     query tells whether the statement's rows are there (custody: the payment's
//     txID in its history). The transaction then commits, which, with synchronous
//     replication, waits until the standbys have what was read.
//
// Only when no primary answers within Options.ResolveCommitWait is the outcome
// unknown (ErrCommitUnknown); and with Options.Unprepared, behind a pooler, whose
// server session is not the client's, it is never asked.

// backendID is a connection's server session: its backend's pid and start time (in
// seconds since the epoch, as the server writes them). The zero value is not known.
type backendID struct {
	pid   int64
	start string
}

// identitySQL is the server session of the connection that runs it.
const identitySQL = `SELECT pid, extract(epoch FROM backend_start)::text FROM pg_stat_activity WHERE pid = pg_backend_pid()`

// settleSQL, asked of a primary about a session ($1 its backend's pid, $2 its start
// time), is true once the session is gone: it was not there, or it was ended within
// $3 milliseconds. pg_current_xact_id makes a standby refuse it.
const settleSQL = `
SELECT pg_current_xact_id() IS NOT NULL AND COALESCE(
       (SELECT pg_terminate_backend(a.pid, $3) FROM pg_stat_activity a
        WHERE a.pid = $1 AND extract(epoch FROM a.backend_start)::text = $2), true)`

// settleTimeout is how long one ask waits for the session to end.
const settleTimeout = time.Second

// keyBackend is where a pgx connection keeps its backendID (PgConn.CustomData).
const keyBackend = "refset.backend"

// takeConn takes a connection of the pool for one unit of work or one statement,
// and, if who is not nil, learns its server session. On a caller's pgx pool
// (db.checksFence), a connection whose server reported that it takes no writes is
// discarded and another taken, as the pools Open makes do before reuse (conns.go),
// up to one more than the pool holds: past that, the server itself takes no writes,
// and the call fails there as it would on Open's pool.
func (db *DB) takeConn(ctx context.Context, who *backendID) (*sqlx.Conn, error) {
	limit := 0
	if db.checksFence {
		limit = db.pool.Stats().OpenConnections + 1
	}
	for drops := 0; ; drops++ {
		c, err := db.pool.Connx(ctx)
		if err != nil {
			return nil, err
		}
		check := db.checksFence && drops < limit
		if !check && who == nil {
			return c, nil
		}
		err = c.Raw(func(dc any) error {
			if pc := pgxConnOf(dc); pc != nil {
				if check {
					if err := takesWrites(ctx, pc); err != nil {
						return err // database/sql discards the connection
					}
				}
				if err := settlePgx(ctx, pc); err != nil {
					return driver.ErrBadConn // what the server keeps prepared is unknown
				}
				if who != nil {
					return pgxIdentify(ctx, pc, who)
				}
			} else if g, ok := dc.(*guardedConn); ok && who != nil {
				return g.identify(ctx, who)
			}
			return nil
		})
		if err == nil {
			return c, nil
		}
		_ = c.Close()
		if !errors.Is(err, driver.ErrBadConn) || !check {
			return nil, err
		}
	}
}

// pgxIdentify sets who to c's server session, asked once per connection.
func pgxIdentify(ctx context.Context, c *pgx.Conn, who *backendID) error {
	data := c.PgConn().CustomData()
	if known, ok := data[keyBackend].(backendID); ok {
		*who = known
		return nil
	}
	if err := c.QueryRow(ctx, identitySQL).Scan(&who.pid, &who.start); err != nil {
		return err
	}
	data[keyBackend] = *who
	return nil
}

// identify sets who to the connection's server session, asked once.
func (c *guardedConn) identify(ctx context.Context, who *backendID) error {
	if c.who.pid == 0 {
		rows, err := c.QueryContext(ctx, identitySQL, nil)
		if err != nil {
			return err
		}
		defer rows.Close()
		v := make([]driver.Value, 2)
		if err := rows.Next(v); err != nil {
			return err
		}
		pid, _ := v[0].(int64)
		start, _ := v[1].([]byte)
		c.who = backendID{pid: pid, start: string(start)}
		if s, ok := v[1].(string); ok {
			c.who.start = s
		}
	}
	*who = c.who
	return nil
}

// queryOwn is refsetdriver.OwnCommits.QueryOwn: query runs with args on one
// connection of the pool, prepared once per connection where the database prepares
// (lib/pq; pgx's own statement cache prepares it too), unprepared with
// Options.Unprepared. A prepared statement that PostgreSQL refuses after a migration
// changed its result's type ("cached plan must not change result type", 0A000) ran
// nothing: it is prepared again and run once more. A statement the server refused as
// read-only discards its connection. A statement whose connection was lost once it
// was sent is settled (settle).
func (db *DB) queryOwn(ctx context.Context, query string, args []any, row func(*sql.Rows) error, committed refsetdriver.CommittedFunc) error {
	if db.Closed() {
		return fmt.Errorf("refset/postgres: query: %w", refset.ErrClosed)
	}
	if err := db.storeEngine.RefuseOwnPool("query"); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		var who backendID
		identify := &who
		if db.unprepared {
			identify = nil // behind a pooler the server session is not the client's
		}
		c, err := db.takeConn(ctx, identify)
		if err != nil {
			return err
		}
		open := pgxOpen(ctx, c)
		answered, err := db.runOwn(ctx, c, query, args, row)
		code := sqlState(err)
		switch {
		case code == "0A000" && attempt == 0:
			_ = c.Raw(func(dc any) error {
				if g, ok := dc.(*guardedConn); ok {
					g.forget(query)
				}
				return nil
			})
			_ = c.Close()
			continue
		case code == codeReadOnlySQLTransaction:
			// Refused: nothing ran. The connection goes, so the next call dials.
			discard(c)
		}
		if err == nil || code != "" || !(lostAfterSent(err, open) || answered && lostConnection(err)) {
			_ = c.Close()
			return err
		}
		// The session is about to be ended, if it is still there: the connection
		// must not go back to the pool, whatever its driver thinks of it.
		discard(c)
		return db.settle(ctx, who, err, committed)
	}
}

// discard makes database/sql close c's connection rather than pool it.
func discard(c *sqlx.Conn) {
	_ = c.Raw(func(any) error { return driver.ErrBadConn })
}

// runOwn runs query on c and calls row on each row. answered is set once the server
// began to answer: a connection lost after that was lost once the statement was
// sent, whatever the driver calls the loss (lib/pq's ErrBadConn, reading the rows).
func (db *DB) runOwn(ctx context.Context, c *sqlx.Conn, query string, args []any, row func(*sql.Rows) error) (answered bool, err error) {
	var rows *sql.Rows
	if db.stmts != nil { // lib/pq, statements prepared
		var st *sql.Stmt
		if st, err = c.PrepareContext(keepPrepared(ctx), query); err != nil {
			return false, err
		}
		defer st.Close() // kept on the connection
		rows, err = st.QueryContext(ctx, args...)
	} else {
		rows, err = c.QueryContext(ctx, query, args...)
	}
	if err != nil {
		return false, err
	}
	defer rows.Close()
	for rows.Next() {
		if err := row(rows); err != nil {
			return true, err
		}
	}
	return true, rows.Err()
}

// sqlState is the SQLSTATE of err, a server's answer, or "".
func sqlState(err error) string {
	if err == nil {
		return "" // before se, which escapes: no allocation on every statement
	}
	var se sqlStater
	if errors.As(err, &se) {
		return se.SQLState()
	}
	return ""
}

// lostAfterSent reports whether err, a statement's, is a connection lost once the
// statement may have reached the server: not a dial that failed, nor a connection
// the driver knew broken before sending. lib/pq's ErrBadConn is that: a guardedConn
// leaves it only to what it did not send. pgx's own word (SafeToRetry, which stdlib
// calls ErrBadConn) is taken only when pgxWasOpen is false, the statement having
// begun on a pgx connection already closed or with its context ended: on a
// connection pgx held open, pgx v5.12 calls a statement sent in the simple protocol
// whose answer was lost "conn closed", safe to retry (conns.go), and a caller's pgx
// pool has no guard that says otherwise. Such a statement is settled, which asks the
// server: it answers right whether the statement was sent or not, at the cost of
// one question.
func lostAfterSent(err error, pgxWasOpen bool) bool {
	var op *net.OpError
	switch {
	case errors.As(err, &op) && op.Op == "dial":
		return false
	case pgconn.SafeToRetry(err) || errors.Is(err, driver.ErrBadConn):
		return pgxWasOpen
	}
	return errors.Is(translateError(err, ""), refset.ErrUnavailable) || errors.Is(err, io.ErrUnexpectedEOF)
}

// pgxOpen reports whether a statement that begins now on c with ctx may be sent
// on pgx: c is pgx's, pgx holds it open, and ctx has not ended (see
// lostAfterSent). It is false on lib/pq.
func pgxOpen(ctx context.Context, c *sqlx.Conn) (open bool) {
	if ctx.Err() != nil {
		return false
	}
	_ = c.Raw(func(dc any) error {
		pc := pgxConnOf(dc)
		open = pc != nil && !pc.IsClosed()
		return nil
	})
	return open
}

// settle is the outcome of a statement that commits on its own, sent on the session
// who, whose connection was lost with lost: nil when committed found its rows, an
// error marked refsetdriver.NotCommitted (with ErrUnavailable) when it did not, and
// ErrCommitUnknown (with ErrUnavailable) when no primary answered within
// Options.ResolveCommitWait. See the top of this file.
func (db *DB) settle(ctx context.Context, who backendID, lost error, committed refsetdriver.CommittedFunc) error {
	cause := translateError(lost, "")
	switch {
	case committed == nil:
		return ownUnknown(cause, "nothing tells whether it committed")
	case db.resolveWait <= 0:
		return ownUnknown(cause, "Options.ResolveCommitWait is negative or the server has no pg_xact_status: the outcome was not asked")
	case who.pid == 0:
		return ownUnknown(cause, "behind a pooler (Options.Unprepared) the statement's server session is not known")
	}
	var committedRows bool
	asked, why, told := db.askUntilTold(ctx, func(ctx context.Context) (bool, string) {
		ended, ok, err := db.askSettled(ctx, who, committed)
		switch {
		case err != nil:
			return false, fmt.Sprintf("no primary answered (last: %v)", err)
		case !ended:
			return false, "its server session had not ended"
		}
		committedRows = ok
		return true, ""
	})
	log := db.Driver().Logger()
	switch {
	case !told:
		return ownUnknown(cause, why)
	case committedRows:
		log.LogAttrs(ctx, slog.LevelWarn, "refset/postgres: connection lost after a statement that commits on its own was sent; it committed",
			slog.Duration("asked_for", asked.Round(time.Millisecond)), slog.Any("cause", cause))
		return nil
	}
	log.LogAttrs(ctx, slog.LevelWarn, "refset/postgres: connection lost after a statement that commits on its own was sent; it did not commit",
		slog.Any("cause", cause))
	return refsetdriver.NotCommitted(sentinel.Wrap(msgPrefix, "query",
		fmt.Errorf("the connection was lost after a statement that commits on its own was sent, and it did not commit (its session ended, its rows are not there): nothing changed: %w", cause)))
}

// askSettled asks a primary, in one transaction, to end the session who if it is
// still there (ended: it is gone), and then committed whether the statement's rows
// are there. The transaction is READ COMMITTED, so that committed's statements see
// what the session committed before it ended.
func (db *DB) askSettled(ctx context.Context, who backendID, committed refsetdriver.CommittedFunc) (ended, ok bool, err error) {
	tx, err := db.begin(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return false, false, err
	}
	defer tx.Rollback()
	if err := tx.QueryRowContext(ctx, settleSQL, who.pid, who.start, settleTimeout.Milliseconds()).Scan(&ended); err != nil || !ended {
		return false, false, err
	}
	if ok, err = committed(ctx, tx); err != nil {
		return false, false, err
	}
	if err := tx.Commit(); err != nil {
		return false, false, err
	}
	return true, ok, nil
}

// ownUnknown is the error of a statement that commits on its own, lost once sent,
// whose outcome no primary told.
func ownUnknown(cause error, why string) error {
	return sentinel.New(msgPrefix, "query", refset.ErrCommitUnknown, fmt.Errorf("the connection was lost after a statement that commits on its own was sent, and whether it committed is unknown (%s): %w", why, cause))
}

// begin begins a transaction on the pool, on a connection takeConn checked.
func (db *DB) begin(ctx context.Context, opts *sql.TxOptions) (*sqlx.Tx, error) {
	if !db.checksFence {
		return db.pool.BeginTxx(ctx, opts)
	}
	c, err := db.takeConn(ctx, nil)
	if err != nil {
		return nil, err
	}
	tx, err := c.BeginTxx(ctx, opts)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	// The *sql.Conn holds the connection until it is closed, and its Close waits
	// until the transaction ends: then the connection goes back to the pool.
	go c.Close()
	return tx, nil
}
