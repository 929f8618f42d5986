package refset

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/refsetdb/refset/internal/ctxerr"
	"github.com/refsetdb/refset/internal/dblog"
	"github.com/refsetdb/refset/internal/sqltext"
	"github.com/refsetdb/refset/refsetdriver"
)

// A hand-over whose commands are all Exec commands is a list of statements, and so is
// an Add with such commands when the store can give its insert as a statement
// (refsetdriver.Inserter). On a database whose driver can send statements before reading
// the results of the ones before (pgx; lib/pq in a simple query), Complete and Add hand
// the list to the database's driver (refsetdriver.Pipeliner, which may refuse a list:
// SelectivePipeliner): BEGIN goes with the first statements and COMMIT with
// the last (on lib/pq, after them), and no statement runs before the row count of the
// one before it was checked: by the server, which refuses the count itself where the
// statement lets it (an INSERT, UPDATE or DELETE), or by reading it before any later
// statement is sent. A two-command hand-over takes one round trip instead of four on
// pgx, two on lib/pq; an Add, one or two instead of three or more. Everything else is InTx's: the same
// translated errors (a wrong count says the count, wherever it was checked),
// retries, logs and context errors.

// pipelined runs cmds for id as a list of statements, when it can: in a new
// transaction (tx is nil), on a database that pipelines, when every command is an
// Exec command and none would end the transaction (the ordinary path refuses that,
// statement by statement, as it always did). ran is false, and nothing ran, when it
// cannot. lead, if not nil, gives the store's own statement (the insert of an Add),
// run first (execs[i] is nil for it), whose errors are translated as the store's are
// and whose row count is not checked. The statements run in one transaction, as a unit of work of InTx's.
func (s *RefSet[T, ID]) pipelined(ctx context.Context, tx Tx, id ID, lead func() (refsetdriver.Statement, error), cmds []Command[ID]) (ran bool, err error) {
	if tx != nil || s.caps.pipe == nil || (lead == nil && len(cmds) == 0) {
		// A hand-over without commands is no list of statements: a pipeline of none
		// is not one a driver need take.
		return false, nil
	}
	first := 0 // where the commands' statements start: after lead's, if any
	if lead != nil {
		first = 1
	}
	// Made at their length, lead's place kept: no slice made twice.
	execs := make([]*execCommand[ID], first, len(cmds)+first)
	stmts := make([]refsetdriver.Statement, first, len(cmds)+first)
	for _, c := range cmds {
		e, isExec := bare(c).(*execCommand[ID])
		if !isExec {
			return false, nil
		}
		q := s.caps.rebind.Rebind(e.query) // as the Tx's Bind: an Exec always has the ID
		if sqltext.EndingStatement(q) != "" {
			return false, nil
		}
		execs = append(execs, e)
		stmts = append(stmts, refsetdriver.Statement{Query: q, Args: e.argsFor(id), Checked: e.wantRows >= 0, Rows: e.wantRows})
	}
	if lead != nil {
		if stmts[0], err = lead(); err != nil { // execs[0] is nil
			return true, err // refused before anything was sent
		}
	}
	if sp, ok := s.caps.pipe.(refsetdriver.SelectivePipeliner); ok && !sp.Pipelines(stmts) {
		return false, nil
	}
	db := s.db
	return true, runUnit(ctx, s.caps, func(ctx context.Context) error {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("refset: in transaction: %w", err)
		}
		start := time.Now() // a pipelined statement is timed from when the first was sent
		err := s.caps.pipe.RunPipeline(ctx, stmts, func(i int, rows int64, err error) error {
			dblog.Slow(ctx, s.caps.log, s.caps.slow, stmts[i].Query, start)
			if execs[i] == nil { // the store's own statement, an insert: as Persist
				if err == nil {
					return nil
				}
				err = ctxerr.Wrap(ctx, db.TranslateError(err, stmts[i].Query))
				if IsSentinel(err) || isContextError(err) {
					return err
				}
				// Written for the table as it was when the store was built.
				return opError("", ErrSchema, err)
			}
			if err != nil {
				// The statement's context is known here: the error says whether its
				// deadline or a cancel cut the statement short.
				err = ctxerr.Wrap(ctx, translateStatement(db, err, stmts[i].Query))
			} else {
				err = execs[i].checkRows(rows)
			}
			if err != nil {
				return commandError(cmds, i-first, err)
			}
			return nil
		})
		if err == nil {
			return nil // before txErr, which escapes: no allocation for a unit that commits
		}
		var txErr *refsetdriver.PipelineError
		if errors.As(err, &txErr) {
			if txErr.Query == "COMMIT" {
				return commitError(db, txErr.Err)
			}
			// BEGIN, or the batch that carries it: a driver that encodes every
			// statement's arguments before it sends any (pgx's simple protocol) fails
			// there for a value it cannot send, a statement's mistake.
			return translateStatement(db, txErr.Err, txErr.Query)
		}
		return err
	})
}
