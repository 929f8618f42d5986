package refsetdriver

import "errors"

// A COMMIT whose connection was lost may or may not have run; refset then reports
// the unit of work with ErrCommitUnknown, and the caller must find out for itself.
// A database that can find out (PostgreSQL: it asks a server, on a new connection,
// about the transaction's id) does it in its DatabaseTx's Commit, and in its
// Pipeliner's commit: nil when the transaction committed, and, when it did not, an
// error marked with NotCommitted, which refset reports as ErrUnavailable without
// ErrCommitUnknown: nothing changed, and the unit of work may run again.

// NotCommitted marks err, the error of a commit that lost its connection, as one
// that a server said did not commit.
func NotCommitted(err error) error {
	if err == nil {
		return nil
	}
	return &notCommitted{err}
}

// DidNotCommit reports whether err was marked with NotCommitted.
func DidNotCommit(err error) bool {
	var nc *notCommitted
	return errors.As(err, &nc)
}

type notCommitted struct{ err error }

func (e *notCommitted) Error() string { return e.err.Error() }
func (e *notCommitted) Unwrap() error { return e.err }
