package refset

import (
	"errors"
	"fmt"
)

// The errors a RefSet and its stores return. Match them with errors.Is: every error the
// library returns wraps one of these and, where a database refused something, the
// driver's own error too (reach it with errors.As), so nothing is lost in translation.
var (
	// ErrNotFound: the object is not in the set, or a reference names an object that
	// does not exist (a foreign key the database refused on insert).
	ErrNotFound = errors.New("not found")

	// ErrDuplicate: an object with that ID is in the set already.
	ErrDuplicate = errors.New("duplicate id")

	// ErrReferenced: the database refused to delete or re-key an object because a row
	// still references it.
	ErrReferenced = errors.New("still referenced")

	// ErrTokenConsumed: the token was released, acquired or completed already. Tokens are
	// single-use; the command lists of a consumed token never run again.
	ErrTokenConsumed = errors.New("token already consumed")

	// ErrInvalidToken: a nil token, or a token that belongs to another set.
	ErrInvalidToken = errors.New("invalid token")

	// ErrInvalidCommand: a nil command in a release or acquire list.
	ErrInvalidCommand = errors.New("invalid command")

	// ErrInvalidTx: a nil transaction or database where one is required.
	ErrInvalidTx = errors.New("invalid transaction")

	// ErrInvalidID: the zero value of the ID type, which never names an object.
	ErrInvalidID = errors.New("invalid id")

	// ErrInvalidIdentifier: a table or column name that is not a plain SQL identifier.
	ErrInvalidIdentifier = errors.New("invalid SQL identifier")

	// ErrSchema: the Go type and the table do not match (a missing column, a missing
	// primary key, an unsupported field type).
	ErrSchema = errors.New("schema mismatch")

	// ErrConflict: the database aborted the transaction to keep concurrent ones apart
	// (serialization failure, deadlock, a locked SQLite database). Transactions the
	// library opens itself are retried a bounded number of times before this surfaces.
	ErrConflict = errors.New("transaction conflict")

	// ErrConstraint: another integrity constraint (NOT NULL, CHECK, a foreign key whose
	// direction the driver does not say) refused the statement.
	ErrConstraint = errors.New("constraint violation")

	// ErrClosed: the store's database has been closed.
	ErrClosed = errors.New("store closed")
)

// opError wraps a sentinel and the underlying cause in one error that matches both.
func opError(op string, sentinel, cause error) error {
	if cause == nil {
		return fmt.Errorf("refset: %s: %w", op, sentinel)
	}
	if errors.Is(cause, sentinel) {
		return fmt.Errorf("refset: %s: %w", op, cause)
	}
	return fmt.Errorf("refset: %s: %w: %w", op, sentinel, cause)
}
