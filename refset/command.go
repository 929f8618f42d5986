package refset

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/refsetdb/refset/internal/txview"
)

// Command is a step of a hand-over: a release command is what the giving component
// does when it lets a reference go (delete its row), an acquire command what the
// receiving one does when it takes it (insert its row). Complete runs all of them in
// one transaction, releases first, in order; the first error undoes them all.
//
// A command must do its work through tx only: it may run again in a new transaction
// if the database aborted the first one with a conflict. tx cannot end the
// transaction (see Tx), and it writes the database's placeholders for ?, so a
// command's own SQL runs on both stores; a command that panics rolls the transaction
// back, and the panic goes on.
type Command[ID comparable] interface {
	Execute(ctx context.Context, tx Tx, id ID) error
}

// CommandFunc adapts a function to a Command.
type CommandFunc[ID comparable] func(ctx context.Context, tx Tx, id ID) error

// Execute calls f.
func (f CommandFunc[ID]) Execute(ctx context.Context, tx Tx, id ID) error { return f(ctx, tx, id) }

// Exec returns a Command that runs query with the object's ID as its first argument
// and args after it, for a holder row with more columns than the ID (an owner, a
// deal). Write the placeholders as ? and the command writes the database's own ($1,
// $2, ... on Postgres) when it runs, so one command serves both stores, for example
//
//	refset.Exec[string](`DELETE FROM pending_blocks WHERE block_id = ?`, 1)
//	refset.Exec[string](`INSERT INTO owned (block_id, owner) VALUES (?, ?)`, 1, "alice")
//
// A ? in a string literal, a quoted name or a comment is left as it is, and so is a
// query that numbers its parameters already ($1 works on both stores too): on
// Postgres, a query whose ? is an operator, as jsonb's ?, ?| and ?& are, writes $1,
// $2, ... for its parameters. The Tx that refset gives Commands and InTx functions
// follows the same rule for statements of one's own (see Tx).
//
// The args are the command's, passed as they are to every run: give values, not
// something that changes after Exec returns. The ID goes as Arg makes it.
//
// If wantRows is at least 0 the statement must affect exactly that many rows, or the
// command fails with ErrNotFound: releasing a reference one never held is a bug that
// should stop the hand-over, not pass silently. Pass -1 to accept any count.
//
// In a transaction refset began, the statement runs prepared once it has run twice:
// each store keeps the statements of Exec commands prepared on its connections, a
// bounded number of them, the least recently used closed first (the stores'
// Options.StatementCache; pgx caches statements itself, and Postgres's
// Options.Unprepared turns preparing off). A Complete whose commands are all Exec
// commands may send several of them at once on a driver that can (pgx): a statement
// never runs before the row count of the one before it was checked.
func Exec[ID comparable](query string, wantRows int64, args ...any) Command[ID] {
	return &execCommand[ID]{query: query, wantRows: wantRows, args: args}
}

// execCommand is the Command Exec returns. Complete knows it: a hand-over made only
// of these is a list of statements, which a database may pipeline.
type execCommand[ID comparable] struct {
	query    string
	wantRows int64
	args     []any // after the ID
}

// argsFor are the statement's arguments for the object id: the ID, then the
// command's own.
func (c *execCommand[ID]) argsFor(id ID) []any {
	return append([]any{Arg(id)}, c.args...)
}

func (c *execCommand[ID]) Execute(ctx context.Context, tx Tx, id ID) error {
	var res sql.Result
	var err error
	if v, ok := tx.(*txview.View); ok {
		// The Tx refset gives commands: the database's placeholders, and the
		// statement prepared when the database keeps it so.
		res, err = v.ExecCommand(ctx, c.query, c.argsFor(id)...)
	} else {
		res, err = tx.ExecContext(ctx, c.query, c.argsFor(id)...)
	}
	if err != nil || c.wantRows < 0 {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	return c.checkRows(id, n)
}

// checkRows is the error of a run that affected n rows, or nil if that is what the
// command wants.
func (c *execCommand[ID]) checkRows(id ID, n int64) error {
	if c.wantRows >= 0 && n != c.wantRows {
		return opError(fmt.Sprintf("command for %v affected %d rows, want %d", id, n, c.wantRows), ErrNotFound, nil)
	}
	return nil
}
