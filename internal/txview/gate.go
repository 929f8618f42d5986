package txview

import (
	"database/sql"
	"errors"
	"fmt"
	"sync"
)

// ErrInFlight is wrapped by the error a View returns, unsent, for a statement that
// starts while another statement of its transaction is in flight. A transaction is
// one connection, and a connection runs one statement at a time: two sent at once
// interleave on it (lib/pq then reads one statement's answer as the other's and the
// connection is lost, with the whole transaction). refset wraps it in its own
// ErrInvalidTx.
var ErrInFlight = errors.New("another statement of the transaction is in flight; a unit of work is one goroutine's (run its statements one after another, or give each goroutine a unit of its own)")

// gate lets one statement of a transaction at a time in: it is shared by every View
// of one raw transaction (a unit of work's, and its savepoints'), since they all send
// to the one connection.
//
// A statement is in flight from the moment a View sends it until its call returns;
// a query's rows keep it in flight until they are closed (read to the end, or
// Close), since until then the rest of its answer waits on the connection. The
// gate cannot tell goroutines apart, so the rule is the same for the goroutine that
// holds the rows: close them before the next statement, as PostgreSQL's drivers
// require anyway (lib/pq loses the connection, pgx fails with "conn busy"). Reading
// rows to the end and then running a statement, the usual pattern, is unaffected.
//
// Statements the stores run on the raw transaction (txview.Raw: their prepared
// writes, refset's savepoints) do not pass the gate: refset runs one call at a time
// in a unit (refsetdriver.EnterUnit). A statement of a View is not refused while such
// a call runs on another goroutine.
type gate struct {
	mu       sync.Mutex
	inFlight string    // the statement whose call runs, "" when none
	rows     *sql.Rows // the rows of the last query, until they are closed
	broken   error     // View.Break's
}

// brokenErr is the error Break broke the transaction with, or nil.
func (g *gate) brokenErr() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.broken
}

// enter lets query in, or says, unsent, which statement of the transaction is in
// flight. leave is to be called once the statement's call returned.
func (g *gate) enter(query string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.busy(query); err != nil {
		return err
	}
	g.inFlight = query
	return nil
}

// leave ends the statement enter let in, with the rows it returned if it was a query
// that succeeded: they keep the gate until closed.
func (g *gate) leave(rows *sql.Rows) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inFlight, g.rows = "", rows
}

// busy is the error of query, unsent, when the gate cannot let it in now; g.mu is
// held.
func (g *gate) busy(query string) error {
	if g.rows != nil {
		// Columns fails once the rows are closed: database/sql documents it so, and
		// it is the one thing it says of a Rows' state.
		if _, err := g.rows.Columns(); err != nil {
			g.rows = nil
		}
	}
	switch {
	case g.inFlight != "":
		return fmt.Errorf("%w: %s was refused, unsent, while %s ran", ErrInFlight, quote(query), quote(g.inFlight))
	case g.rows != nil:
		return fmt.Errorf("%w: %s was refused, unsent, while the rows of an earlier query were open (close them, or read them to the end, first)", ErrInFlight, quote(query))
	}
	return nil
}

// quote is query as an error names it: quoted, and cut short when long.
func quote(query string) string {
	const most = 80
	if r := []rune(query); len(r) > most {
		query = string(r[:most]) + "..."
	}
	return fmt.Sprintf("%q", query)
}
