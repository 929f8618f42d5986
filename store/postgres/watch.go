package postgres

import (
	"context"
	"database/sql/driver"
	"io"
	"reflect"
	"strings"
	"time"
)

// lib/pq ends a call whose context ends only by asking the server to: it sends a
// cancel request, on a connection of its own, and goes on waiting for the answer to
// the call. A server that stopped answering on connections it accepted (a hung host,
// a proxy whose backend froze) answers neither, so the call, and the unit of work
// around it, waited for ever, however short its deadline. pgx closes the connection
// when the context ends.
//
// So each call on a lib/pq connection of the pools refset makes (a guardedConn's:
// its statements, prepared or not, and the rows they return until closed, BEGIN and
// the transaction until its COMMIT or ROLLBACK, Ping) is watched: once its context
// has ended, and cutGrace has passed with the call still running, the connection's
// line is cut (startup.go). Every read and write on it then fails at once, lib/pq's
// cancel request's included, and the call returns:
//
//   - the context's error (cutOff), as when the server refuses a statement because
//     lib/pq's cancel request reached it. Whether a statement that commits on its
//     own ran is then unknown, as it is on pgx.
//   - for COMMIT, a lost connection (lostDuring), whose outcome refset asks on
//     another connection (resolve.go): the server may have received it. A COMMIT
//     that was never sent (its connection was cut before) is the context's error.
//
// The grace lets a server that answers end the call itself: lib/pq's cancel request
// makes it refuse the statement (57014), and the connection is used again (unless
// lib/pq closes it itself, as it does after an unprepared statement so ended). A
// transaction's calls made with the context it began with are watched by its own
// watch, which lasts until it ends, since database/sql ends the transaction with
// that context; a call with another context has a watch of its own.
//
// A connection whose line was cut is done with: it is invalid (IsValid, and
// ResetSession's driver.ErrBadConn), and database/sql closes it.
//
// On the path of a call whose context does not end, the cost is one
// context.AfterFunc registration (two small allocations, beside lib/pq's nine of a
// statement), with a watcher and rows reused from call to call; none for a context
// that never ends.

// cutGrace is how long a call on a lib/pq connection goes on after its context
// ended before its connection is cut.
const cutGrace = time.Second

// watcher watches one call's context at a time. Once its context has ended during
// a call it is done with: the goroutine of expire may still be running.
type watcher struct {
	l      *line
	ctx    context.Context
	stop   func() bool // context.AfterFunc's
	expiry func()      // expire, made once
	over   chan struct{}
}

func newWatcher(l *line) *watcher {
	w := &watcher{l: l, over: make(chan struct{})}
	w.expiry = w.expire
	return w
}

// expire runs when the watched context ends: it cuts the line unless the call
// returns within cutGrace.
func (w *watcher) expire() {
	t := time.NewTimer(cutGrace)
	defer t.Stop()
	select {
	case <-t.C:
		w.l.cut(w.ctx.Err())
	case <-w.over:
	}
}

// idleWatchers is how many watchers a connection keeps for its next calls: one for
// a transaction, one for a call in it with a context of its own, one for rows left
// open meanwhile.
const idleWatchers = 3

// watch starts watching ctx for a call on c, and returns what unwatch ends: nil
// for a context that never ends, or one the open transaction's watch watches.
func (c *guardedConn) watch(ctx context.Context) *watcher {
	done := ctx.Done()
	if done == nil || done == c.txDone {
		return nil
	}
	var w *watcher
	if n := len(c.idle); n > 0 {
		w, c.idle = c.idle[n-1], c.idle[:n-1]
	} else {
		w = newWatcher(c.l)
	}
	w.ctx = ctx
	w.stop = context.AfterFunc(ctx, w.expiry)
	return w
}

// unwatch ends w's watch, once its call returned.
func (c *guardedConn) unwatch(w *watcher) {
	if w == nil {
		return
	}
	if !w.stop() {
		close(w.over) // expire is running, or about to: it is left to end
		return
	}
	w.ctx, w.stop = nil, nil
	if len(c.idle) < idleWatchers {
		if c.idle == nil {
			c.idle = make([]*watcher, 0, idleWatchers)
		}
		c.idle = append(c.idle, w)
	}
}

// cutShort is err, a call's error, as its caller is to hear it when c's line was
// cut: the context's end (cutOff), or, for a COMMIT sent on a line still sound when
// it began, a lost connection (lostDuring). Any other error is left as it is.
func (c *guardedConn) cutShort(err error, sound, commit bool) error {
	if err == nil || err == io.EOF || !c.l.isCut.Load() {
		return err
	}
	cut := &cutOff{cause: c.l.cutBy()}
	if commit && sound {
		return &lostDuring{err: cut}
	}
	return cut
}

// isCommit reports whether query, a statement run alone, is COMMIT, as
// libpqPipeline sends it.
func isCommit(query string) bool { return strings.EqualFold(query, "COMMIT") }

// cutOff is the error of a call whose connection was cut: the server had not
// answered within cutGrace of the end of the call's context (or of its
// transaction's), which it matches.
type cutOff struct{ cause error }

func (e *cutOff) Error() string {
	return "statement interrupted: the server had not answered " + cutGrace.String() + " after the context ended, and the connection was closed (" + e.cause.Error() + ")"
}

func (e *cutOff) Unwrap() error { return e.cause }

// libpqRows is what lib/pq's rows implement, and database/sql uses: a guardedRows
// has the same, and no other (TestGuardedRowsKeepLibPQs).
type libpqRows interface {
	driver.Rows
	driver.RowsNextResultSet
	driver.RowsColumnTypeScanType
	driver.RowsColumnTypeDatabaseTypeName
	driver.RowsColumnTypeLength
	driver.RowsColumnTypePrecisionScale
}

// guardedRows are the rows of a query on a guardedConn: read from the connection
// until closed, so its watch lasts until then.
type guardedRows struct {
	rows libpqRows // nil once closed
	c    *guardedConn
	w    *watcher
}

var _ libpqRows = (*guardedRows)(nil)

// watchedRows are rows, returned by a call on c that w watched, with the watch:
// c's own guardedRows, reused, unless those are open still.
func (c *guardedConn) watchedRows(rows driver.Rows, w *watcher) driver.Rows {
	lr, ok := rows.(libpqRows)
	if !ok { // not lib/pq's: left as they are, unwatched
		c.unwatch(w)
		return rows
	}
	r := &c.rows
	if r.rows != nil {
		r = &guardedRows{}
	}
	*r = guardedRows{rows: lr, c: c, w: w}
	return r
}

func (r *guardedRows) Close() error {
	if r.rows == nil {
		return nil
	}
	err := r.rows.Close()
	r.c.unwatch(r.w)
	r.rows, r.w = nil, nil
	return r.c.cutShort(err, false, false)
}

func (r *guardedRows) Next(dest []driver.Value) error {
	return r.c.cutShort(r.rows.Next(dest), false, false)
}

func (r *guardedRows) NextResultSet() error {
	return r.c.cutShort(r.rows.NextResultSet(), false, false)
}

func (r *guardedRows) Columns() []string      { return r.rows.Columns() }
func (r *guardedRows) HasNextResultSet() bool { return r.rows.HasNextResultSet() }
func (r *guardedRows) ColumnTypeScanType(i int) reflect.Type {
	return r.rows.ColumnTypeScanType(i)
}

func (r *guardedRows) ColumnTypeDatabaseTypeName(i int) string {
	return r.rows.ColumnTypeDatabaseTypeName(i)
}

func (r *guardedRows) ColumnTypeLength(i int) (int64, bool) { return r.rows.ColumnTypeLength(i) }
func (r *guardedRows) ColumnTypePrecisionScale(i int) (precision, scale int64, ok bool) {
	return r.rows.ColumnTypePrecisionScale(i)
}
