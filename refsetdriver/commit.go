package refsetdriver

import (
	"context"
	"errors"
)

// A COMMIT whose connection was lost may or may not have run; refset then reports
// the unit of work with ErrCommitUnknown, and the caller must find out for itself.
// A database that can find out (PostgreSQL: it asks a server, on a new connection,
// about the transaction's id) does it in its DatabaseTx's Commit, and in its
// Pipeliner's commit: nil when the transaction committed, and, when it did not, an
// error marked with NotCommitted, which refset reports as ErrUnavailable without
// ErrCommitUnknown: nothing changed, and the unit of work may run again.

// NotCommitted marks err, the error of a commit that lost its connection, as one
// that a server said did not commit.
func NotCommitted(err error) error { return mark[notCommitted](err) }

// DidNotCommit reports whether err was marked with NotCommitted.
func DidNotCommit(err error) bool { return marked[notCommitted](err) }

type notCommitted struct{}

// A store that commits units of work together (SQLite's group commit) may have the
// shared COMMIT refused for what one unit wrote, a deferred foreign key, which fails
// every unit of the group. It then reports each unit's failure as ErrConflict marked
// with RunAlone: refset runs the unit again (refset.InTx's retries) with its context
// marked by Alone, and the store gives a unit whose context MustRunAlone a
// transaction of its own, so that the unit that wrote it fails, and only it.

// RunAlone marks err, a unit of work's error, as one to run again alone.
func RunAlone(err error) error { return mark[runAlone](err) }

// RunsAlone reports whether err was marked with RunAlone.
func RunsAlone(err error) bool { return marked[runAlone](err) }

type runAlone struct{}

type aloneKey struct{}

// Alone returns ctx marked for the next attempt at a unit of work whose error
// RunsAlone.
func Alone(ctx context.Context) context.Context {
	return context.WithValue(ctx, aloneKey{}, true)
}

// MustRunAlone reports whether ctx was marked by Alone: its unit of work must not
// share a transaction with others.
func MustRunAlone(ctx context.Context) bool {
	alone, _ := ctx.Value(aloneKey{}).(bool)
	return alone
}

// marking is an error marked with the kind K: the same error, which says more to
// those who ask (marked).
type marking[K any] struct{ err error }

func (e *marking[K]) Error() string { return e.err.Error() }
func (e *marking[K]) Unwrap() error { return e.err }

// mark marks err, if any, with K.
func mark[K any](err error) error {
	if err == nil {
		return nil
	}
	return &marking[K]{err}
}

// marked reports whether err, or an error it wraps, was marked with K.
func marked[K any](err error) bool {
	if err == nil {
		return false // before m, which escapes: no allocation for every unit of work
	}
	var m *marking[K]
	return errors.As(err, &m)
}
