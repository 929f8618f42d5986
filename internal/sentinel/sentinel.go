// Package sentinel defines refset's sentinel errors below every package that wraps
// them: package refset documents and exports them (refset.ErrNotFound is
// sentinel.ErrNotFound), and the packages refset itself imports (refsetdriver, the
// identifiers) wrap the same values.
package sentinel

import "errors"

// The errors, documented where users read them: package refset.
var (
	ErrNotFound          = errors.New("not found")
	ErrDuplicate         = errors.New("duplicate id")
	ErrReferenced        = errors.New("still referenced")
	ErrTokenConsumed     = errors.New("token already consumed")
	ErrInvalidToken      = errors.New("invalid token")
	ErrInvalidCommand    = errors.New("invalid command")
	ErrInvalidTx         = errors.New("invalid transaction")
	ErrInvalidID         = errors.New("invalid id")
	ErrInvalidIdentifier = errors.New("invalid SQL identifier")
	ErrSchema            = errors.New("schema mismatch")
	ErrConflict          = errors.New("transaction conflict")
	ErrConstraint        = errors.New("constraint violation")
	ErrClosed            = errors.New("store closed")
	ErrUnavailable       = errors.New("database unavailable")
	ErrCommitUnknown     = errors.New("commit outcome unknown")
	ErrTimeout           = errors.New("database timeout")
	ErrInvalidConfig     = errors.New("invalid configuration")
	ErrStatement         = errors.New("statement refused")
	ErrInUnitOfWork      = errors.New("called inside a unit of work it cannot join")
)

// All lists every sentinel above.
var All = []error{
	ErrNotFound,
	ErrDuplicate,
	ErrReferenced,
	ErrTokenConsumed,
	ErrInvalidToken,
	ErrInvalidCommand,
	ErrInvalidTx,
	ErrInvalidID,
	ErrInvalidIdentifier,
	ErrSchema,
	ErrConflict,
	ErrConstraint,
	ErrClosed,
	ErrUnavailable,
	ErrCommitUnknown,
	ErrTimeout,
	ErrInvalidConfig,
	ErrStatement,
	ErrInUnitOfWork,
}
