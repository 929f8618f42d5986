// Package txview is the view of a transaction that refset hands to code it runs inside
// one: Commands, functions given to refset.InTx. The view runs statements and cannot
// end the transaction: it has no Commit or Rollback, and it refuses statements that
// would end it (COMMIT, ROLLBACK, BEGIN, ...). Only refset ends a transaction it began.
//
// The view writes the database's placeholders: a statement written with ? runs on
// PostgreSQL as it does on SQLite (Bind has the rule).
//
// The package is internal so that the way back from a view to the transaction under
// it (Raw) is open to the stores, which run their prepared statements on it, and
// closed to callers.
package txview

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/refsetdb/refset/internal/ctxerr"
	"github.com/refsetdb/refset/internal/dblog"
	"github.com/refsetdb/refset/internal/sqltext"
	"github.com/refsetdb/refset/refsetdriver"
)

// Querier runs statements: *sql.Tx, *sqlx.Tx and a View all do.
type Querier = refsetdriver.Querier

// ErrEndsTransaction is wrapped by the error a View returns for a statement that would
// end or begin a transaction. refset wraps it in its own ErrInvalidCommand.
var ErrEndsTransaction = errors.New("the statement would end the transaction; only refset ends a transaction it began")

// View is a transaction as the code that runs inside it sees it.
//
// A refused statement is remembered: whatever the code does with the error (a
// Command may swallow it), Refused reports it, and refset then rolls the unit of work
// back instead of committing what a caller meant to commit early.
//
// A View runs one statement of its transaction at a time, with every View of the
// same transaction (New): one that starts while another is in flight (see gate for
// when that is) is not sent, and fails with an error wrapping ErrInFlight. That
// refusal is not remembered: nothing was sent, the transaction is as it was, and the
// caller, who has the error, decides (a unit of work that returns nil commits what
// its statements did, without the refused one), as with a statement the database
// refused.
type View struct {
	raw Querier
	Options
	gate *gate // shared by the Views of raw

	mu      sync.Mutex
	refused error
}

// Options are what a View does besides running statements.
type Options struct {
	// Translate maps a driver error of a statement to the caller's sentinels.
	Translate func(err error, query string) error
	// Refuse wraps ErrEndsTransaction for a refused statement.
	Refuse func(error) error
	// Overlap wraps the error (ErrInFlight) of a statement that was not sent because
	// another of the transaction was in flight; nil leaves it as it is.
	Overlap func(error) error
	// Rebind rewrites ? placeholders to the database's own ($1 on Postgres): the
	// database's refsetdriver.Driver; nil leaves every statement as it is.
	Rebind Rebinder
	// Log receives statements slower than Slow (none when Slow is 0).
	Log  *slog.Logger
	Slow time.Duration
}

// Rebinder rewrites a statement's ? placeholders to its database's own.
type Rebinder interface {
	Rebind(query string) string
}

// RebindFunc is a function that rewrites placeholders, as a Rebinder.
type RebindFunc func(query string) string

func (f RebindFunc) Rebind(query string) string { return f(query) }

// New returns a view of raw for one unit of work or savepoint. raw may itself be a
// View (a savepoint inside a unit of work): the new view runs on the same
// transaction, lets one statement at a time in with raw (they share one connection),
// and remembers its own refusals.
func New(raw Querier, opts Options) *View {
	if v, ok := raw.(*View); ok {
		return &View{raw: v.raw, Options: opts, gate: v.gate}
	}
	return &View{raw: raw, Options: opts, gate: new(gate)}
}

// Refused is the error of the first statement the view refused, or nil; or, once
// the transaction under it is broken (Break), that error.
func (v *View) Refused() error {
	v.mu.Lock()
	refused := v.refused
	v.mu.Unlock()
	if refused == nil && v.gate != nil {
		refused = v.gate.brokenErr()
	}
	return refused
}

// Break marks the transaction under v broken with err: from now on Refused of every
// View of it (New) reports err, if it refused nothing itself, so that the unit of work
// that began the transaction rolls back whatever the code inside it does with the
// error (refset: a savepoint whose nesting a stray call on another goroutine
// confused).
func (v *View) Break(err error) {
	if v.gate == nil {
		v.mu.Lock()
		if v.refused == nil {
			v.refused = err
		}
		v.mu.Unlock()
		return
	}
	v.gate.mu.Lock()
	if v.gate.broken == nil {
		v.gate.broken = err
	}
	v.gate.mu.Unlock()
}

// Raw is the transaction under q when q is a View, and q itself otherwise.
func Raw(q Querier) Querier {
	if v, ok := q.(*View); ok {
		return v.raw
	}
	return q
}

// Bind is query as the view sends it with args: its ? placeholders rewritten to
// the database's own by Rebind ($1, $2, ... on PostgreSQL; SQLite's are ?), leaving
// any ? in a string literal, a quoted name or a comment as it is. A statement is
// left as it is, whatever its ?, when
//
//   - it has no arguments (a ? there can only be an operator: jsonb's ?, ?| and ?&);
//   - it numbers its parameters already ($1 outside literals and comments): its ?
//     are operators then, and ? and $n never mix in one statement;
//   - its first argument is one of package pgx's (pgx.NamedArgs, a
//     pgx.QueryExecMode, ...): pgx rewrites that statement itself.
//
// No statement that ran on PostgreSQL before is changed by this: one with arguments
// had to number them or pass them through pgx. On PostgreSQL a statement that needs
// jsonb's ? beside arguments writes $1, $2 for them, as it always had to.
func (v *View) Bind(query string, args []any) string {
	if len(args) == 0 || v.Rebind == nil {
		return query
	}
	q := v.Rebind.Rebind(query)
	if q != query && pgxOption(args[0]) {
		return query
	}
	return q
}

// pgxPackage is the import path of package pgx, whose option arguments
// (NamedArgs, QueryExecMode, QueryResultFormats, ...) pgx's database/sql driver
// takes as the first argument of a statement it then rewrites or runs its own way.
const pgxPackage = "github.com/jackc/pgx/v5"

// pgxOption reports whether arg is a value of one of package pgx's own types.
func pgxOption(arg any) bool {
	t := reflect.TypeOf(arg)
	return t != nil && t.PkgPath() == pgxPackage
}

// ExecContext runs query in the transaction, refusing one that would end it, with
// the database's placeholders (Bind).
func (v *View) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	query = v.Bind(query, args)
	return run(ctx, v, query, func() (sql.Result, error) { return v.raw.ExecContext(ctx, query, args...) })
}

// CommandExecer is a transaction that runs the statements of refset.Exec commands
// its own way: a store's, prepared from its database's statement cache.
type CommandExecer interface {
	ExecCommand(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// ExecCommand runs the statement of a refset.Exec command: as ExecContext does (with
// the database's placeholders), but through the transaction's ExecCommand when it has
// one.
func (v *View) ExecCommand(ctx context.Context, query string, args ...any) (sql.Result, error) {
	query = v.Bind(query, args)
	exec := v.raw.ExecContext
	if c, ok := v.raw.(CommandExecer); ok {
		exec = c.ExecCommand
	}
	return run(ctx, v, query, func() (sql.Result, error) { return exec(ctx, query, args...) })
}

// QueryContext runs query in the transaction, refusing one that would end it, with
// the database's placeholders (Bind).
//
// The statement stays in flight until its rows are closed: until then no other
// statement of the transaction is sent, from any goroutine (ErrInFlight). Read
// them to the end, or close them, before the next statement.
func (v *View) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	query = v.Bind(query, args)
	return run(ctx, v, query, func() (*sql.Rows, error) { return v.raw.QueryContext(ctx, query, args...) })
}

// run runs query through send unless it would end the transaction, logs it when
// slow, and translates its error, which says whether the context's deadline or a
// cancel cut the statement short, if one did: the statement's context is known here,
// and not where its error is translated.
func run[R any](ctx context.Context, v *View, query string, send func() (R, error)) (R, error) {
	var none R
	if err := v.check(query); err != nil {
		return none, err
	}
	if err := v.enter(query); err != nil {
		return none, err
	}
	start := time.Now()
	res, err := send()
	dblog.Slow(ctx, v.Log, v.Slow, query, start)
	rows, _ := any(res).(*sql.Rows)
	v.leave(rows) // rows keep the statement in flight until they are closed
	if err != nil {
		return none, ctxerr.Wrap(ctx, v.Translate(err, query))
	}
	return res, nil
}

// enter lets query in through the transaction's gate, or is the error, wrapped by
// Overlap, of a statement that may not be sent now. A statement let in leaves once
// its call returned.
func (v *View) enter(query string) error {
	if v.gate == nil { // a View made without New, as tests make one
		return nil
	}
	err := v.gate.enter(query)
	if err != nil && v.Overlap != nil {
		err = v.Overlap(err)
	}
	return err
}

// leave ends the statement enter let in; rows, a query's, keep the gate until closed.
func (v *View) leave(rows *sql.Rows) {
	if v.gate != nil {
		v.gate.leave(rows)
	}
}

// QueryRowContext runs query in the transaction, with the database's placeholders
// (Bind). A query that would end the
// transaction is not sent: its row's Scan fails with context.Canceled, and the
// refusal is remembered (Refused), so the unit of work fails with it whatever the
// caller does with the Scan error.
//
// The row is read before QueryRowContext returns, the statement in flight all the
// while (a *sql.Row would hold the rest of the answer on the connection until Scan,
// unseen): its Scan returns what it would have, the driver's values or errors, and
// one that may not be sent now fails, unsent, with the ErrInFlight of QueryContext.
func (v *View) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	query = v.Bind(query, args)
	if err := v.check(query); err != nil {
		// A context already cancelled makes the Row hold context.Canceled without
		// touching the transaction.
		dead, cancel := context.WithCancel(ctx)
		cancel()
		return v.raw.QueryRowContext(dead, query, args...)
	}
	if err := v.enter(query); err != nil {
		return (&answer{err: err}).row(ctx)
	}
	start := time.Now()
	a := readRow(v.raw.QueryContext(ctx, query, args...))
	dblog.Slow(ctx, v.Log, v.Slow, query, start)
	v.leave(nil)
	return a.row(ctx)
}

func (v *View) check(query string) error {
	verb := sqltext.EndingStatement(query)
	if verb == "" {
		return nil
	}
	err := fmt.Errorf("%w: %s", v.Refuse(ErrEndsTransaction), verb)
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.refused == nil {
		v.refused = err
	}
	return err
}
