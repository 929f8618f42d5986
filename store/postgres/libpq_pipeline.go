package postgres

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"

	"github.com/jmoiron/sqlx"
	"github.com/refsetdb/refset/refsetdriver"
)

// libpqPipeline runs a unit made only of statements on lib/pq in two round trips
// where database/sql takes one per statement and two more: the first is one simple
// query, BEGIN, the commit's ticket (resolve.go) and the statements, each EXECUTEd with
// its arguments as literals where it is prepared on the connection (prepared,
// executed) or with them written into its text (inlined), and the second is COMMIT. Each statement in it
// returns one row, the count of rows it affected (rowCountedSQL), or, when refset
// checks the count, the count the server checked (rowCheckedSQL: a wrong count fails
// the statement and aborts the transaction, so nothing after it runs and COMMIT is
// never sent). The rows arrive in order, so an error is the statement's whose row
// was due.
//
// A unit with a statement that cannot go in the simple query (an argument without a
// literal that means what lib/pq would send, a statement that is no INSERT, UPDATE or
// DELETE) is not taken (takes): it runs as before. One that Postgres refuses as a
// common table expression (a table's rules) is found out when it runs: it is sent
// on its own with its arguments from then on, after the statements before it, and
// the ones after it go in a simple query of their own. COMMIT is sent once the
// ticket was read, as on the path of database/sql, so a lost COMMIT is resolved the
// same.
type libpqPipeline struct {
	db *DB
	// begin is BEGIN as the unit's transactions begin. In the simple query it is
	// followed by first[1], the ticket, or, when no ticket is read with BEGIN,
	// first[0], beginMarkSQL: either returns one row, read before the statements'.
	begin string
	first [2]string
	// checks are the statements as a simple query sends them (rowChecks.wrapped).
	checks *rowChecks
}

// newLibpqPipeline is the pipeline of db, opened on lib/pq, whose transactions have
// the isolation level iso, or ok false for a level lib/pq refuses (the transaction
// then begins as before, and fails as before).
func newLibpqPipeline(db *DB, iso sql.IsolationLevel) (libpqPipeline, bool) {
	begin, ok := beginSQL(iso, false, false)
	if !ok {
		return libpqPipeline{}, false
	}
	return libpqPipeline{db: db, begin: begin, first: [2]string{beginMarkSQL, beginTicketSQL}, checks: newRowChecks()}, true
}

// takes is refsetdriver.SelectivePipeliner.Pipelines: whether every statement goes
// in the simple query. A unit with one that does not runs as any unit of work does,
// its statements prepared (one round trip each, where sent alone unprepared they
// take two). An empty unit is not taken: it has no statement to end the query.
func (p libpqPipeline) takes(stmts []refsetdriver.Statement) bool {
	if len(stmts) == 0 {
		return false
	}
	for _, s := range stmts {
		if q := p.checks.wrapped(s); q == "" || !inlined(nil, q, s.Args) {
			return false
		}
	}
	return true
}

// run is refsetdriver.Pipeliner.RunPipeline.
func (p libpqPipeline) run(ctx context.Context, stmts []refsetdriver.Statement, result refsetdriver.ResultFunc) error {
	conn, ticket, err := p.db.pipelineConn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	err = p.runOn(ctx, conn, stmts, result, ticket)
	for forgot := false; ; {
		var again bool
		if again, err = p.again(ctx, conn, stmts, result, err, &forgot); !again {
			break
		}
		err = p.runOn(ctx, conn, stmts, result, ticket)
	}
	var pe *refsetdriver.PipelineError
	if ticket != nil && ticket.read && errors.As(err, &pe) && pe.Query == "COMMIT" && lostConnection(pe.Err) && !refsetdriver.DidNotCommit(pe.Err) {
		if err := p.db.resolveCommit(ctx, *ticket, pe.Err); err != nil {
			return &refsetdriver.PipelineError{Query: "COMMIT", Err: err}
		}
		return nil
	}
	return err
}

// again reports whether a unit that failed with err is to run again, and else the
// error it fails with. A statement Postgres refused as a common table expression ran
// nothing the unit keeps, and nothing ran after it: it is sent as it is from now on,
// and the unit runs again. So does a unit whose prepared statements the server no
// longer has (someone ran DEALLOCATE ALL on the connection): prepared again, once
// (forgot).
func (p libpqPipeline) again(ctx context.Context, conn *sqlx.Conn, stmts []refsetdriver.Statement, result refsetdriver.ResultFunc, err error, forgot *bool) (bool, error) {
	var unchecked *uncheckable
	var missing *unprepared
	switch {
	case errors.As(err, &unchecked):
		p.checks.refuse(stmts[unchecked.i])
		if ctx.Err() != nil {
			return false, orError(result(unchecked.i, 0, unchecked.err), unchecked.err)
		}
		return true, nil
	case errors.As(err, &missing):
		switch {
		case (*forgot || ctx.Err() != nil) && missing.i < 0:
			return false, &refsetdriver.PipelineError{Query: "BEGIN", Err: missing.err}
		case *forgot || ctx.Err() != nil:
			return false, orError(result(missing.i, 0, missing.err), missing.err)
		}
		*forgot = true
		p.forgetPrepared(conn)
		return true, nil
	}
	return false, err
}

// runOn runs stmts on conn, in one transaction, reading the commit's ticket into
// ticket unless it is nil. Every way out but a commit rolls back, a panic too.
func (p libpqPipeline) runOn(ctx context.Context, conn *sqlx.Conn, stmts []refsetdriver.Statement, result refsetdriver.ResultFunc, ticket *commitTicket) error {
	committed := false
	defer func() {
		if !committed {
			rollbackConn(ctx, conn)
		}
	}()
	// The ticket is read with BEGIN, or, where the server refuses that to the role
	// (DB.beginTicket), just before COMMIT.
	ticketFirst := ticket != nil && p.db.beginTicket
	// What each statement is sent as: queries[0] is what follows BEGIN, queries[i+1]
	// stmts[i] (wrapped, or as it is if plain[i]), "" for one sent on its own.
	queries := make([]string, len(stmts)+1)
	plain := make([]bool, len(stmts))
	queries[0] = p.first[b2i(ticketFirst)]
	for i, st := range stmts {
		queries[i+1] = p.checks.wrapped(st)
		if queries[i+1] != "" && i == len(stmts)-1 && !st.Checked {
			// The last statement needs no row to be told from the others: what
			// fails after the rows before it is its failure.
			queries[i+1], plain[i] = st.Query, true
		}
	}
	names, err := p.prepared(ctx, conn, queries)
	if err != nil {
		return &refsetdriver.PipelineError{Query: "BEGIN", Err: err}
	}
	var batch, stmt strings.Builder
	for start, first := 0, true; first || start < len(stmts); first = false {
		batch.Reset()
		if first {
			batch.WriteString(p.begin)
			batch.WriteString("; ")
			if !executed(&batch, names[0], queries[0], nil) {
				batch.WriteString(queries[0])
			}
		}
		end := start
		for ; end < len(stmts); end++ {
			// Written apart first: a value may write no literal now though it did
			// when the unit was taken (a driver.Valuer that changed its mind).
			q, args := queries[end+1], stmts[end].Args
			if q == "" || !writeStatement(&stmt, names[end+1], q, args) {
				break
			}
			if batch.Len() > 0 {
				batch.WriteString("; ")
			}
			batch.WriteString(stmt.String())
		}
		if batch.Len() > 0 {
			if err := p.runBatch(ctx, conn, batch.String(), first, stmts, start, end, end == len(stmts) && plain[end-1], result, ticket); err != nil {
				return err
			}
		}
		if end < len(stmts) {
			// The statement that does not go in a simple query, with its arguments.
			res, err := conn.ExecContext(ctx, stmts[end].Query, stmts[end].Args...)
			var n int64
			if err == nil {
				n, err = res.RowsAffected()
			}
			if err != nil {
				return orError(result(end, 0, err), err)
			}
			if err := result(end, n, nil); err != nil {
				return err
			}
			end++
		}
		start = end
	}
	if err := ctx.Err(); err != nil {
		return err // given up on before COMMIT was sent
	}
	if ticket != nil && !ticketFirst {
		t, err := readTicket(conn.QueryRowContext(ctx, ticketSQL))
		if err != nil {
			// COMMIT was never sent: nothing committed (db.commit's ticket).
			return &refsetdriver.PipelineError{Query: "COMMIT", Err: refsetdriver.NotCommitted(err)}
		}
		*ticket = t
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return &refsetdriver.PipelineError{Query: "COMMIT", Err: err}
	}
	committed = true
	return nil
}

// writeStatement writes to b (emptied first) the statement query as a simple query
// sends it, with args: EXECUTE of name, if it is prepared, or query with args written
// in; false when args cannot be written.
func writeStatement(b *strings.Builder, name, query string, args []any) bool {
	b.Reset()
	if executed(b, name, query, args) {
		return true
	}
	b.Reset()
	return inlined(b, query, args)
}

// prepared is the name each of queries is prepared under on conn's connection, ""
// for one that is not: it prepares those it can (SQL's PREPARE, a round trip each,
// once a connection), up to DB.unitStatements on the connection, so that the simple
// query EXECUTEs them, parsed and planned once, rather than having the server parse
// and plan them again on every run. A PREPARE the server refuses leaves its
// statement to be sent as text, to fail there as it always did. err is a lost
// connection.
func (p libpqPipeline) prepared(ctx context.Context, conn *sqlx.Conn, queries []string) ([]string, error) {
	names := make([]string, len(queries))
	if p.db.unitStatements <= 0 {
		return names, nil
	}
	err := conn.Raw(func(dc any) error {
		c, ok := dc.(*guardedConn)
		if !ok {
			return nil
		}
		for i, q := range queries {
			if q == "" {
				continue
			}
			key := unitKey{db: p.db, query: q}
			if name, ok := c.units[key]; ok {
				names[i] = name
				continue
			}
			if len(c.units) >= p.db.unitStatements {
				continue
			}
			name := "refset_u" + strconv.Itoa(c.unitSeq+1)
			if _, err := c.ExecContext(ctx, "PREPARE "+name+" AS "+q, nil); err != nil {
				if !c.conn.IsValid() {
					return err
				}
				continue
			}
			if c.units == nil {
				c.units = map[unitKey]string{}
			}
			c.unitSeq++
			c.units[key] = name
			names[i] = name
		}
		return nil
	})
	return names, err
}

// forgetPrepared forgets the statements prepared on conn's connection for this
// database (a server that no longer has them: DEALLOCATE ALL, DISCARD ALL).
func (p libpqPipeline) forgetPrepared(conn *sqlx.Conn) {
	_ = conn.Raw(func(dc any) error {
		if c, ok := dc.(*guardedConn); ok {
			for k := range c.units {
				if k.db == p.db {
					delete(c.units, k)
				}
			}
		}
		return nil
	})
}

// runBatch sends query, a simple query, and reads its rows in order: BEGIN's row (the
// ticket's, into ticket unless it is nil, or beginMarkSQL's) if begins, then one per
// statement of stmts[start:end], told to result, but for the last if plainLast: sent
// as it is, it returns no row, and its count, which nobody checks, is not read (-1).
func (p libpqPipeline) runBatch(ctx context.Context, conn *sqlx.Conn, query string, begins bool, stmts []refsetdriver.Statement, start, end int, plainLast bool, result refsetdriver.ResultFunc, ticket *commitTicket) error {
	rows, err := conn.QueryContext(ctx, query)
	if err != nil {
		if begins && sqlState(err) == codeInvalidSQLStatementName {
			return &unprepared{i: -1, err: err} // the ticket's
		}
		if begins {
			if refusesWrites(err, codeFeatureNotSupported) {
				// A standby refuses BEGIN READ WRITE: the connection is done.
				markReadOnly(conn)
			}
			return &refsetdriver.PipelineError{Query: "BEGIN", Err: err}
		}
		return p.failed(stmts, start, err, result)
	}
	defer rows.Close()
	if begins {
		var raw string
		if err := scanOne(rows, &raw); err != nil {
			return &refsetdriver.PipelineError{Query: "BEGIN", Err: err}
		}
		if ticket != nil && p.db.beginTicket {
			*ticket = commitTicket{raw: raw, read: true}
		}
	}
	counted := end
	if plainLast {
		counted--
	}
	for i := start; i < counted; i++ {
		if begins || i > start {
			// The end of the row before, where the server's refusal of statement i,
			// if any, arrives; then i's row.
			if err := nextSet(rows); err != nil {
				return p.failed(stmts, i, err, result)
			}
		}
		var n int64
		if err := scanOne(rows, &n); err != nil {
			return p.failed(stmts, i, err, result)
		}
		if err := result(i, n, nil); err != nil {
			return err
		}
	}
	if rows.Next() {
		return &refsetdriver.PipelineError{Query: "BEGIN", Err: errors.New("refset/postgres: a simple query returned more rows than its statements")}
	}
	if err := rows.Err(); err != nil {
		if plainLast {
			return p.failed(stmts, end-1, err, result)
		}
		return err
	}
	if rows.NextResultSet() {
		return &refsetdriver.PipelineError{Query: "BEGIN", Err: errors.New("refset/postgres: a simple query returned more results than its statements")}
	}
	if plainLast {
		return result(end-1, -1, nil)
	}
	return nil
}

// failed is the error of stmts[i], which failed with err in a simple query: the count
// the server refused, as a count; a statement Postgres refused as a common table
// expression, to be sent as it is (uncheckable); or the failure.
func (p libpqPipeline) failed(stmts []refsetdriver.Statement, i int, err error, result refsetdriver.ResultFunc) error {
	if sqlState(err) == codeInvalidSQLStatementName {
		return &unprepared{i: i, err: err}
	}
	if refused, ok := checkRefused(stmts[i].Checked, i, err, result); ok {
		return refused
	}
	return orError(result(i, 0, err), err)
}

// unprepared is the failure of stmts[i] (-1: of what follows BEGIN) whose prepared
// statement the server did not have: the unit is to be prepared and run again (run).
type unprepared struct {
	i   int
	err error
}

func (e *unprepared) Error() string { return e.err.Error() }
func (e *unprepared) Unwrap() error { return e.err }

// scanOne reads the one row of rows' current result into dest.
func scanOne(rows *sql.Rows, dest any) error {
	if !rows.Next() {
		return orError(rows.Err(), errors.New("refset/postgres: a statement of a simple query returned no row"))
	}
	return rows.Scan(dest)
}

// nextSet moves rows past the end of its current result, one row long, to the next:
// the server's error, if it refused the next statement.
func nextSet(rows *sql.Rows) error {
	if rows.Next() {
		return errors.New("refset/postgres: a statement of a simple query returned more than one row")
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if !rows.NextResultSet() {
		return orError(rows.Err(), errors.New("refset/postgres: a simple query returned fewer results than its statements"))
	}
	return nil
}

// rollbackConn ends conn's transaction, if it has one open, even when ctx has ended
// (waiting up to cancelGrace for the server). A connection that cannot roll back is
// closed, so that database/sql discards it rather than lend it again inside the
// transaction given up on.
func rollbackConn(ctx context.Context, conn *sqlx.Conn) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelGrace)
	defer cancel()
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		discard(conn)
	}
}

// markReadOnly marks conn's lib/pq connection as one whose server takes no writes,
// which database/sql then closes (guardedConn).
func markReadOnly(conn *sqlx.Conn) {
	_ = conn.Raw(func(dc any) error {
		if c, ok := dc.(*guardedConn); ok {
			c.readOnly.Store(true)
		}
		return nil
	})
}
