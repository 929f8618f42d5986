package refset

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"time"

	"github.com/refsetdb/refset/internal/ctxerr"
	"github.com/refsetdb/refset/internal/sentinel"
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
// A command that fails says which it was, as every failed command of a call does:
// its place in the call's list (a hand-over's release and acquire commands are one
// list, releases first) and its statement, as in "refset: complete n1: acquire
// command 2 of 3 (UPDATE owners SET block_id = ? WHERE owner = ?): affected 0 rows, want
// 1".
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
	return c.checkRows(n)
}

// checkRows is the error of a run that affected n rows, or nil if that is what the
// command wants.
func (c *execCommand[ID]) checkRows(n int64) error {
	if c.wantRows >= 0 && n != c.wantRows {
		return &rowsError{n: n, want: c.wantRows}
	}
	return nil
}

func (c *execCommand[ID]) describe() string { return brief(c.query) }

// rowsError is the error of an Exec command whose statement affected another number
// of rows than it wants: ErrNotFound, since the rows it meant were not there (a
// reference it releases was never held). Its message says the counts; the command's
// place and statement come before it (commandError).
type rowsError struct{ n, want int64 }

func (e *rowsError) Error() string {
	return fmt.Sprintf("affected %d rows, want %d", e.n, e.want)
}

func (e *rowsError) Is(target error) bool { return target == ErrNotFound }

// holdCommand is the Command of RefSet.Hold.
type holdCommand[T Identifiable[ID], ID comparable] struct {
	set    *RefSet[T, ID]
	holder string
	ttl    time.Duration
}

func (c *holdCommand[T, ID]) Execute(ctx context.Context, tx Tx, id ID) error {
	if c.holder == "" {
		return opError("hold", ErrInvalidCommand, errors.New("empty holder"))
	}
	if c.ttl < 0 {
		return opError("hold", ErrInvalidCommand, fmt.Errorf("negative ttl %v", c.ttl))
	}
	if err := c.set.made("hold"); err != nil {
		return err
	}
	return c.set.store.Hold(ctx, tx, id, c.holder, c.ttl)
}

func (c *holdCommand[T, ID]) describe() string { return fmt.Sprintf("hold by %q", c.holder) }

// unholdCommand is the Command of RefSet.Unhold.
type unholdCommand[T Identifiable[ID], ID comparable] struct {
	set    *RefSet[T, ID]
	holder string
}

func (c *unholdCommand[T, ID]) Execute(ctx context.Context, tx Tx, id ID) error {
	if err := c.set.made("unhold"); err != nil {
		return err
	}
	return c.set.store.Unhold(ctx, tx, id, c.holder)
}

func (c *unholdCommand[T, ID]) describe() string { return fmt.Sprintf("unhold by %q", c.holder) }

// sided is a command of a hand-over, recorded by Release or Acquire, which side says.
type sided[ID comparable] struct {
	Command[ID]
	side string // "release" or "acquire"
}

// bare is c without the side a hand-over recorded it with.
func bare[ID comparable](c Command[ID]) Command[ID] {
	if s, ok := c.(sided[ID]); ok {
		return s.Command
	}
	return c
}

// describer is a Command refset made, which says what it is.
type describer interface{ describe() string }

// commandError is err, the error of cmds[i], saying which command it was: its place
// in the list, its side of a hand-over, and what it is (an Exec command's statement,
// a hold, a func's name).
func commandError[ID comparable](cmds []Command[ID], i int, err error) error {
	c, side := cmds[i], ""
	if s, ok := c.(sided[ID]); ok {
		c, side = s.Command, s.side+" "
	}
	var what string
	switch c := c.(type) {
	case describer:
		what = c.describe()
	case CommandFunc[ID]:
		what = "func " + funcName(c)
	default:
		what = fmt.Sprintf("%T", c)
	}
	return sentinel.Wrap("", fmt.Sprintf("%scommand %d of %d (%s)", side, i+1, len(cmds), what), err)
}

// funcName is the name of f's function as the runtime knows it, without its
// package's path: "main.release", "main.main.func1" for a function literal.
func funcName(f any) string {
	fn := runtime.FuncForPC(reflect.ValueOf(f).Pointer())
	if fn == nil {
		return "?"
	}
	name := fn.Name()
	return name[strings.LastIndexByte(name, '/')+1:]
}

// maxBrief is how much of a statement a command's error quotes.
const maxBrief = 120

// brief is query on one line, its spaces collapsed, and cut in the middle, between
// words, when long: enough to find the command in one's code.
func brief(query string) string {
	q := strings.Join(strings.Fields(query), " ")
	if len(q) <= maxBrief {
		return q
	}
	head, tail := q[:maxBrief*2/3], q[len(q)-maxBrief/3:]
	if i := strings.LastIndexByte(head, ' '); i > 0 {
		head = head[:i]
	}
	if i := strings.IndexByte(tail, ' '); i >= 0 {
		tail = tail[i+1:]
	}
	return head + " ... " + tail
}

// runAll runs cmds for id in tx, in order, and stops at the first that fails: its
// error, translated if a driver's (a row's Scan in a CommandFunc) and saying whether
// the context's deadline or a cancel cut it short, names the command.
func (s *RefSet[T, ID]) runAll(ctx context.Context, tx Tx, id ID, cmds []Command[ID]) error {
	for i, c := range cmds {
		if err := c.Execute(ctx, tx, id); err != nil {
			return commandError(cmds, i, ctxerr.Wrap(ctx, s.db.TranslateError(err, "")))
		}
	}
	return nil
}
