// Package ctxerr makes an error that a database call failed with, while its context
// was ending, match the context's own error.
//
// Drivers report a statement cut short by its context in their own words: lib/pq
// returns the server's 57014 "canceling statement due to user request" for a deadline
// as for a cancellation, and database/sql returns sql.ErrTxDone for a transaction it
// rolled back because the context ended. A caller asks errors.Is(err,
// context.DeadlineExceeded); Wrap makes that true without losing the driver's error.
package ctxerr

import (
	"context"
	"errors"
)

// Wrap returns err, made to match ctx.Err() too when ctx has ended and err does not
// match it already. A nil err stays nil: a call that succeeded did so whatever the
// context did after.
func Wrap(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	cause := ctx.Err()
	if cause == nil || errors.Is(err, cause) {
		return err
	}
	return &ended{err: err, cause: cause}
}

// ended is an error that happened while its context ended.
type ended struct{ err, cause error }

func (e *ended) Error() string   { return e.err.Error() + " (" + e.cause.Error() + ")" }
func (e *ended) Unwrap() []error { return []error{e.err, e.cause} }
