package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lib/pq"
)

// holdGrace is how long the drop of a test's schema waits for the sessions that
// still hold locks in it to let go by themselves before it ends them: a pool the
// test closed may still be ending a statement (a closed pgx connection leaves its
// statement running until its cancel request arrives, through PgBouncer later
// still). A transaction the test left open never lets go.
const holdGrace = 2 * time.Second

// dropAtEnd runs drop, the DROP that removes a test's schema, as tb ends. A
// transaction the test left open on the schema (a Tx it never committed, a
// connection it never closed) holds locks there that the drop would wait for
// until dropTimeout, then fail, leaving the schema behind. So the sessions still
// holding the schema after holdGrace are ended first, and the test fails naming
// each, for its author to find the leak; the drop then goes through all the same.
func dropAtEnd(tb testing.TB, db *sql.DB, schema, drop string) {
	tb.Helper()
	// Not tb.Context(): it is already cancelled when cleanups run.
	ctx, cancel := context.WithTimeout(context.Background(), dropTimeout)
	defer cancel()
	ended, err := endHolders(ctx, db, schema)
	if len(ended) > 0 {
		tb.Errorf("pgtest: the test ended with %d session(s) still holding locks in its schema %s, which keep it from being dropped: %s "+
			"Terminated so the schema could be dropped:\n\t%s", len(ended), schema, leakAdvice, joinHolders(ended))
	}
	if err != nil {
		tb.Errorf("pgtest: the test ended with sessions still holding locks in its schema %s: %s\n\t%v", schema, leakAdvice, err)
	}
	if err := dropRetrying(ctx, db, drop); err != nil {
		tb.Errorf("pgtest: %s (is a transaction of the test still open?): %v", drop, err)
	}
}

// leakAdvice says what leaves a session holding a test's schema, and what to do.
const leakAdvice = "a transaction left open, or a connection left running a statement. " +
	"Commit or roll back every transaction, and close what the test opens on the schema, before the test ends."

// holder is a session, other than the one asking, that holds a lock in a schema.
type holder struct {
	pid                       int
	application, state, query string
}

func (h holder) String() string {
	q := strings.Join(strings.Fields(h.query), " ")
	if len(q) > 200 {
		q = q[:200] + "..."
	}
	return fmt.Sprintf("pid %d (application %q, state %q, last query %q)", h.pid, h.application, h.state, q)
}

func joinHolders(hs []holder) string {
	s := make([]string, len(hs))
	for i, h := range hs {
		s[i] = h.String()
	}
	return strings.Join(s, "\n\t")
}

// holdersSQL lists the sessions, but the one asking, that hold a lock on the schema
// $1 itself (CREATE in it takes one) or on a table, index or sequence in it: what a
// DROP of the schema waits for.
const holdersSQL = `SELECT DISTINCT a.pid, COALESCE(a.application_name, ''), COALESCE(a.state, ''), COALESCE(a.query, '')
	FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
	WHERE l.pid <> pg_backend_pid() AND l.granted
	AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
	AND ((l.locktype = 'relation' AND l.relation IN (
			SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1))
		OR (l.locktype = 'object' AND l.classid = 'pg_namespace'::regclass
			AND l.objid = (SELECT oid FROM pg_namespace WHERE nspname = $1)))
	ORDER BY a.pid`

// endHolders waits up to holdGrace for the sessions holding locks in schema to let
// go, then terminates those that still hold them and returns those it terminated.
// Terminating another role's session takes superuser or membership of
// pg_signal_backend (or of that role): the error names the sessions it could not
// end and says so, and the drop will wait for them.
func endHolders(ctx context.Context, db *sql.DB, schema string) (ended []holder, err error) {
	deadline := time.Now().Add(holdGrace)
	var held []holder
	for {
		var err error
		held, err = holders(ctx, db, schema)
		if err != nil {
			return nil, fmt.Errorf("list the sessions that hold it: %w", err)
		}
		if len(held) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	var errs []error
	for _, h := range held {
		// It returns false for a session that ended on its own meanwhile.
		if _, err := db.ExecContext(ctx, `SELECT pg_terminate_backend($1)`, h.pid); err != nil {
			var pe *pq.Error
			if errors.As(err, &pe) && pe.Code == "42501" { // insufficient_privilege
				err = fmt.Errorf("%w (ending another role's session takes the role of %s to be a superuser, or a member of "+
					"pg_signal_backend for a session that is not a superuser's; the drop waits for it, at most %v)", err, EnvDSN, dropTimeout)
			}
			errs = append(errs, fmt.Errorf("cannot terminate %s: %w", h, err))
			continue
		}
		ended = append(ended, h)
	}
	return ended, errors.Join(errs...)
}

// holders lists the sessions, but db's own, that hold a lock in schema (holdersSQL).
func holders(ctx context.Context, db *sql.DB, schema string) ([]holder, error) {
	rows, err := db.QueryContext(ctx, holdersSQL, schema)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var hs []holder
	for rows.Next() {
		var h holder
		if err := rows.Scan(&h.pid, &h.application, &h.state, &h.query); err != nil {
			return nil, err
		}
		hs = append(hs, h)
	}
	return hs, rows.Err()
}
