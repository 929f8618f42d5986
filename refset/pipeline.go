package refset

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/refsetdb/refset/internal/dblog"
	"github.com/refsetdb/refset/internal/sqltext"
	"github.com/refsetdb/refset/refsetdriver"
)

// A hand-over whose commands are all Exec commands is a list of statements, and so is
// an Add with such commands when the store can give its insert as a statement
// (refsetdriver.Inserter). On a database whose driver can send statements before reading
// the results of the ones before (pgx), Complete and Add hand the list to the
// database's driver (refsetdriver.Pipeliner): BEGIN goes with the first statements and COMMIT with
// the last, and a statement whose row count is checked is read before any later one
// is sent. A two-command hand-over (a release checked, an acquire not) takes two round
// trips instead of four; an Add, one instead of three or more. Everything else is
// InTx's: the same translated errors, retries, logs and context errors.

// statementsOf is cmds as the statements they run for id, when every command is an
// Exec command; ok is false otherwise, and when a statement would end the transaction
// (the ordinary path refuses it, statement by statement, as it always did).
func statementsOf[ID comparable](rebind func(string) string, id ID, cmds []Command[ID]) (execs []*execCommand[ID], stmts []refsetdriver.Statement, ok bool) {
	execs = make([]*execCommand[ID], len(cmds))
	stmts = make([]refsetdriver.Statement, len(cmds))
	for i, c := range cmds {
		e, isExec := c.(*execCommand[ID])
		if !isExec {
			return nil, nil, false
		}
		q := rebind(e.query)
		if sqltext.EndingStatement(q) != "" {
			return nil, nil, false
		}
		execs[i] = e
		stmts[i] = refsetdriver.Statement{Query: q, Args: []any{Arg(id)}, Checked: e.wantRows >= 0}
	}
	return execs, stmts, true
}

// runPipelined runs stmts for id through run, in one transaction, as a unit of work
// of InTx's. execs[i] is the Exec command stmts[i] is, or nil for a statement of the
// store's own (the insert of an Add), whose errors are translated as the store's are
// and whose row count is not checked.
func runPipelined[ID comparable](ctx context.Context, db Database, caps capabilities, id ID, execs []*execCommand[ID], stmts []refsetdriver.Statement) error {
	log, slow := caps.log, caps.slow
	return runUnit(ctx, caps, func() error {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("refset: in transaction: %w", err)
		}
		start := time.Now() // a pipelined statement is timed from when the first was sent
		err := caps.pipe.RunPipeline(ctx, stmts, func(i int, rows int64, err error) error {
			dblog.Slow(ctx, log, slow, stmts[i].Query, start)
			if execs[i] == nil { // the store's own statement, an insert: as Persist
				if err != nil {
					return db.TranslateError(err, stmts[i].Query)
				}
				return nil
			}
			if err != nil {
				return translateStatement(db, err, stmts[i].Query)
			}
			return execs[i].checkRows(id, rows)
		})
		var txErr *refsetdriver.PipelineError
		if errors.As(err, &txErr) {
			if txErr.Query == "COMMIT" {
				return commitError(db, txErr.Err)
			}
			return db.TranslateError(txErr.Err, txErr.Query)
		}
		return err
	})
}
