package refset

import (
	"context"
	"fmt"
)

// Command is a step of a hand-over: a release command is what the giving component
// does when it lets a reference go (delete its row), an acquire command what the
// receiving one does when it takes it (insert its row). Complete runs all of them in
// one transaction, releases first, in order; the first error undoes them all.
//
// A command must do its work through tx only: it may run again in a new transaction
// if the database aborted the first one with a conflict.
type Command[ID comparable] interface {
	Execute(ctx context.Context, tx Tx, id ID) error
}

// CommandFunc adapts a function to a Command.
type CommandFunc[ID comparable] func(ctx context.Context, tx Tx, id ID) error

// Execute calls f.
func (f CommandFunc[ID]) Execute(ctx context.Context, tx Tx, id ID) error { return f(ctx, tx, id) }

// Exec returns a Command that runs query with the object's ID as its only argument,
// written in the dialect's placeholder ($1 on Postgres, ? on SQLite), for example
//
//	refset.Exec[string](`DELETE FROM pending_blocks WHERE block_id = $1`, 1)
//
// If wantRows is at least 0 the statement must affect exactly that many rows, or the
// command fails with ErrNotFound: releasing a reference one never held is a bug that
// should stop the hand-over, not pass silently. Pass -1 to accept any count.
func Exec[ID comparable](query string, wantRows int64) Command[ID] {
	return CommandFunc[ID](func(ctx context.Context, tx Tx, id ID) error {
		res, err := tx.ExecContext(ctx, query, Arg(id))
		if err != nil {
			return err
		}
		if wantRows < 0 {
			return nil
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n != wantRows {
			return opError(fmt.Sprintf("command for %v affected %d rows, want %d", id, n, wantRows), ErrNotFound, nil)
		}
		return nil
	})
}
