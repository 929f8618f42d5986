// Package pipeline lets a database run a unit of work made only of statements, the
// hand-over of refset.Exec commands or an Add with them, in fewer round trips than one
// per statement: a
// driver that can send several statements before reading their results (pgx's batch)
// sends BEGIN with the first ones, and COMMIT with the last.
//
// refset decides what runs (the statements, how each result is checked, how errors
// are translated, retries); the database's Runner only moves the statements and their
// results. A database carries its Runner in an embedded Handle, whose one method is
// unexported, so Of finds it while a caller outside this module can neither reach it
// nor fake it.
package pipeline

import "context"

// Statement is one statement of a pipelined unit of work.
type Statement struct {
	Query string
	Args  []any
	// Checked is set when the statement's result decides whether the unit goes on
	// (a row count to check): no later statement may run before it is seen, so the
	// Runner reads its result before sending the next ones.
	Checked bool
}

// Inserter is a set's store that can give the statement that inserts an object, so
// that an Add of the object with Exec commands is a unit of statements too: [BEGIN,
// INSERT, the commands..., COMMIT] in one round trip when no result is checked.
type Inserter[T any] interface {
	InsertStatement(obj T) Statement
}

// ResultFunc is told the outcome of statement i, in order: the rows it affected, or
// the driver's error. A non-nil return ends the unit: the Runner rolls the
// transaction back and returns that error.
type ResultFunc func(i int, rows int64, err error) error

// Runner runs stmts in one new transaction and commits it, unless result refused an
// outcome. Statements run in order, and none after a failed one or after a Checked
// one whose result was refused. A failure to begin or to commit comes back as an
// *Error, with the driver's error untranslated; a commit whose outcome is unknown
// (the connection lost once COMMIT was sent) is one to commit.
type Runner func(ctx context.Context, stmts []Statement, result ResultFunc) error

// Error is a failure of the transaction itself: Query is "BEGIN" or "COMMIT".
type Error struct {
	Query string
	Err   error
}

func (e *Error) Error() string { return e.Query + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Handle carries a database's Runner. A store's database embeds it through an
// unexported alias, so the field stays out of the database's API.
type Handle struct{ run Runner }

// NewHandle returns the Handle of run (nil: the database does not pipeline).
func NewHandle(run Runner) Handle { return Handle{run: run} }

func (h Handle) refsetPipeline() Runner { return h.run }

// carrier is a database that embeds a Handle.
type carrier interface{ refsetPipeline() Runner }

// Of is db's Runner, or nil when db runs statements one at a time.
func Of(db any) Runner {
	if c, ok := db.(carrier); ok {
		return c.refsetPipeline()
	}
	return nil
}
