package refset

import (
	"errors"

	"github.com/refsetdb/refset/internal/sentinel"
)

// The errors a RefSet and its stores return. Match them with errors.Is: every error the
// library returns wraps one of these, or the context's own error (context.Canceled,
// context.DeadlineExceeded) when the call's context ended, or is the error a caller's
// own Command or function returned, passed on as it is. Where a database refused
// something the driver's own error is wrapped too (reach it with errors.As), so
// nothing is lost in translation.
var (
	// ErrNotFound: the object is not in the set, or a reference names an object that
	// does not exist (a foreign key the database refused on insert).
	ErrNotFound = sentinel.ErrNotFound

	// ErrDuplicate: an object with that ID is in the set already.
	ErrDuplicate = sentinel.ErrDuplicate

	// ErrReferenced: the database refused to delete or re-key an object because a row
	// still references it.
	ErrReferenced = sentinel.ErrReferenced

	// ErrTokenConsumed: the token was released, acquired or completed already. Tokens are
	// single-use; the command lists of a consumed token never run again.
	ErrTokenConsumed = sentinel.ErrTokenConsumed

	// ErrInvalidToken: a nil token, or a token that belongs to another set.
	ErrInvalidToken = sentinel.ErrInvalidToken

	// ErrInvalidCommand: a nil command in a release or acquire list or given to Add
	// or Upgrade (a nil interface, a nil CommandFunc, a nil pointer), a nil function
	// given to InTx or RetryConflicts, or a statement that would end or begin a
	// transaction (COMMIT, ROLLBACK, END, BEGIN, ...) run by a Command or a function
	// given to InTx. Only refset ends a transaction it began; the unit of work is
	// rolled back.
	ErrInvalidCommand = sentinel.ErrInvalidCommand

	// ErrInvalidTx: a nil transaction or database where one is required, a
	// connection pool where a transaction is required, or a transaction that has
	// already ended (or, on Postgres, that an earlier failed statement aborted).
	ErrInvalidTx = sentinel.ErrInvalidTx

	// ErrInvalidID: the zero value of the ID type, which never names an object, or
	// a value that cannot be an ID of the table (where any value is taken, as by
	// cleanup's Why and Object: a struct, or a number for a text column).
	ErrInvalidID = sentinel.ErrInvalidID

	// ErrInvalidIdentifier: a table or column name that is not a plain SQL identifier.
	ErrInvalidIdentifier = sentinel.ErrInvalidIdentifier

	// ErrSchema: the Go type and the table do not match (a missing column, a missing
	// primary key, an unsupported field type), or a statement names a table, column
	// or function the database does not have.
	ErrSchema = sentinel.ErrSchema

	// ErrConflict: the database aborted the transaction to keep concurrent ones apart
	// (serialization failure, deadlock, a locked SQLite database). Transactions the
	// library opens itself are retried a bounded number of times before this surfaces.
	ErrConflict = sentinel.ErrConflict

	// ErrConstraint: another integrity constraint (NOT NULL, CHECK, a foreign key whose
	// direction the driver does not say) refused the statement.
	ErrConstraint = sentinel.ErrConstraint

	// ErrClosed: the store's database has been closed.
	ErrClosed = sentinel.ErrClosed

	// ErrUnavailable: the database could not be reached, or the connection was lost
	// during the call (a server restart or shutdown, a failover, a network failure, a
	// terminated backend, too many connections, a server that takes no writes, a
	// SQLite file that cannot be opened or read, a PostgreSQL server that refused a
	// connection the pool made after Open: a login or database it took then). Nothing the call did was committed,
	// unless the error also matches ErrCommitUnknown: on PostgreSQL, a COMMIT that lost
	// its connection is asked about on a new one, and is ErrUnavailable alone only
	// when the server said it did not commit (a call whose commit the server said went
	// through returns nil). It may pass: retry later, or let refset do it
	// (store.Options.RetryUnavailable).
	ErrUnavailable = sentinel.ErrUnavailable

	// ErrCommitUnknown: the connection was lost while a transaction was committing,
	// and no server could tell whether it committed (SQLite never loses one; on
	// PostgreSQL, no primary answered within postgres.Options.ResolveCommitWait, or
	// the server no longer knew the transaction; the message says which). It comes
	// with ErrUnavailable. Check what is stored before doing again work that must not
	// happen twice: refset never runs such a unit of work again by itself.
	ErrCommitUnknown = sentinel.ErrCommitUnknown

	// ErrTimeout: the database gave up on a statement at a limit of its own
	// (Postgres statement_timeout, lock_timeout, idle_in_transaction_session_timeout).
	// The transaction was rolled back. A deadline of the call's context gives
	// context.DeadlineExceeded instead.
	ErrTimeout = sentinel.ErrTimeout

	// ErrInvalidConfig: an option or connection setting that cannot work: a SQLite
	// path that names no file, an unknown option value, a Postgres role or password
	// the server refuses at Open, a database that does not exist then.
	ErrInvalidConfig = sentinel.ErrInvalidConfig

	// ErrStatement: the database refused a statement for a reason no other sentinel
	// names: a syntax error, a wrong number of arguments, a value of the wrong type,
	// an exception raised by a trigger. It is almost always a caller's own SQL; the
	// driver's error says what.
	ErrStatement = sentinel.ErrStatement

	// ErrInUnitOfWork: a call made with the context of a unit of work (the ctx InTx
	// gives its function, or a Command gets) that cannot join the unit, because it
	// commits on its own: clean-up's Install, Collect and Sweep, NewStore's migrations,
	// a store's Begin. It fails at once, changing nothing, rather than wait for the
	// connection the unit holds (SQLite's one writer, the last one of a pool) or commit
	// outside the unit; make it before InTx or after InTx returns. refset's own calls
	// (Add, Upgrade, Complete, Get, Load, InTx, ...) join the unit instead. On SQLite it
	// is also the error of a write made inside InTx's function, on its goroutine, with
	// a context that carries no unit (the one InTx was given): it would wait for the
	// writer the unit holds until the context ended.
	ErrInUnitOfWork = sentinel.ErrInUnitOfWork
)

// IsSentinel reports whether err matches one of the sentinel errors above: an error
// that is not the context's, nor a caller's own, always does.
func IsSentinel(err error) bool {
	for _, s := range sentinel.All {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// opError wraps a sentinel and the underlying cause in one error that matches both,
// saying each once (see package sentinel): the sentinel's text is left out when the
// cause matches it already, and the cause's own refset prefix is dropped.
func opError(op string, s, cause error) error { return sentinel.New("refset", op, s, cause) }

// wrapOp is err from inside op ("complete n1"), said once: "refset: complete n1: "
// before err's message, without the refset prefix that message starts with.
func wrapOp(op string, err error) error { return sentinel.Wrap("refset", op, err) }

// idText is an object's ID as an error's message shows it (sentinel.ID): quoted if it
// has characters that do not print, cut if long.
func idText(id any) string { return sentinel.ID(id) }
