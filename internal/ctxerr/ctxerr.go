// Package ctxerr makes an error that a database call failed with, while its context
// was ending, match the context's own error, and say which: a deadline or a cancel.
//
// Drivers report a statement cut short by its context in their own words: lib/pq
// returns the server's 57014 "canceling statement due to user request" for a deadline
// as for a cancellation (and pgx does, for the cancel request refset's pipeline sends),
// go-sqlite3 its interrupt, and database/sql returns sql.ErrTxDone for a transaction
// it rolled back because the context ended. A caller asks errors.Is(err,
// context.DeadlineExceeded); Wrap makes that true without losing the driver's error.
//
// A store's translation of a driver error has no context to ask: it marks such a
// report with Interrupted, and the first Wrap whose context ended says which it was.
package ctxerr

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// Wrap returns err, made to match ctx.Err() too when ctx has ended and err does not
// match it already, its message then ending with the context's. An interrupted
// statement (Interrupted) learns from ctx which of the two ended it. A nil err stays
// nil: a call that succeeded did so whatever the context did after.
func Wrap(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	cause := ctx.Err()
	if cause == nil {
		return err
	}
	var in *interrupted
	if errors.As(err, &in) && in.learn(cause) {
		// Its message said only that the statement was interrupted: now it says why.
		return &ended{err: err, cause: cause}
	}
	if errors.Is(err, cause) {
		return err
	}
	return &ended{err: err, cause: cause}
}

// ended is an error that happened while its context ended.
type ended struct{ err, cause error }

func (e *ended) Error() string   { return e.err.Error() + " (" + e.cause.Error() + ")" }
func (e *ended) Unwrap() []error { return []error{e.err, e.cause} }

// Interrupted returns err, a driver's report that a statement was cut short on
// request (the server's 57014 "canceling statement due to user request", SQLite's
// interrupt), as an error that reads "statement interrupted" whatever the driver's
// words, and matches the error of the context that ended it: context.Canceled until
// a Wrap learns otherwise (an operator's pg_cancel_backend ends no context, and is a
// cancel too), context.DeadlineExceeded once a Wrap whose context's deadline passed
// has seen it. The driver's error stays in the chain.
func Interrupted(err error) error { return &interrupted{err: err} }

// IsInterrupted reports whether err is, or wraps, an Interrupted error.
func IsInterrupted(err error) bool {
	var in *interrupted
	return errors.As(err, &in)
}

type interrupted struct {
	err   error
	ended atomic.Int32 // what a Wrap learnt: notLearnt, byCancel or byDeadline
}

const (
	notLearnt int32 = iota
	byCancel
	byDeadline
)

// learn records that cause ended the statement, unless a Wrap did so already, and
// reports whether it was the first.
func (e *interrupted) learn(cause error) bool {
	by := byCancel
	if errors.Is(cause, context.DeadlineExceeded) {
		by = byDeadline
	}
	return e.ended.CompareAndSwap(notLearnt, by)
}

func (e *interrupted) Error() string { return "statement interrupted" }
func (e *interrupted) Unwrap() error { return e.err }

func (e *interrupted) Is(target error) bool {
	switch e.ended.Load() {
	case byDeadline:
		return target == context.DeadlineExceeded
	case notLearnt:
		// A driver's error that names the context's already (pgx's timeout) says
		// which itself.
		if errors.Is(e.err, context.DeadlineExceeded) || errors.Is(e.err, context.Canceled) {
			return false
		}
	}
	return target == context.Canceled
}

// Sleep waits d, or until ctx ends, when it returns ctx's error: the wait between
// the attempts of work that runs again, which a caller's context stops.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
