package refset

import (
	"context"
	"time"

	"github.com/refsetdb/refset/internal/dblog"
)

// Observer is told what refset did, for metrics: package otelrefset turns it into
// OpenTelemetry instruments, and this package imports no metrics library. A database
// supplies one through an optional method Observer() Observer (the stores' DB do, from
// their Options.Observer); without it nothing is told.
//
// Its methods run on the caller's goroutine, inside no transaction, and must return
// quickly: they sit on the paths of Add and Complete. Embed NoObserver to implement
// only some of them.
type Observer interface {
	// Added is n objects stored by a committed Add or AddAll, or by their Tx forms
	// when the call returned nil (the caller's transaction may still roll back).
	Added(ctx context.Context, n int)
	// HandedOver is every Complete and CompleteTx that ran its commands, with how
	// long they took and their result. One refused before running anything (a
	// consumed or invalid token) is not a hand-over and is not told.
	HandedOver(ctx context.Context, took time.Duration, err error)
	// Retried is each run of a unit of work that InTx (or RetryConflicts) runs
	// again because the database aborted it; cause matches ErrConflict.
	Retried(ctx context.Context, cause error)
	// Conflicted is a conflict that outlasted the retries: the caller gets err.
	Conflicted(ctx context.Context, err error)
	// Collected is a clean-up Collect that returned nil: objects deleted, expired
	// holds removed, the batch transactions it ran, and how long it took.
	Collected(ctx context.Context, deleted, holdsExpired int64, batches int, took time.Duration)
	// ReadFellBack is a read outside a transaction that went to the database's replica
	// (a hot standby, postgres.Options.Replica) and was then made on the primary.
	// read names it ("get", "has", "branch", "report"); reason says why: "missing"
	// (the replica had no such row: not replicated yet, or not stored at all),
	// "behind" (a report's replica had not replayed what the primary committed before
	// the report began, within Options.ReplicaWait), or "failed" (the replica returned
	// an error).
	ReadFellBack(ctx context.Context, read, reason string)
}

// NoObserver is an Observer that does nothing: what a database without one has, and
// a base to embed for an observer that wants only some calls.
type NoObserver struct{}

func (NoObserver) Added(context.Context, int)                                  {}
func (NoObserver) HandedOver(context.Context, time.Duration, error)            {}
func (NoObserver) Retried(context.Context, error)                              {}
func (NoObserver) Conflicted(context.Context, error)                           {}
func (NoObserver) Collected(context.Context, int64, int64, int, time.Duration) {}
func (NoObserver) ReadFellBack(context.Context, string, string)                {}

// ObserverOf is db's observer: what its Observer method returns, or NoObserver when
// it has no such method or returns nil. Packages built on refset (clean-up) tell
// theirs through it.
func ObserverOf(db Database) Observer { return dblog.ObserverOf[Observer](db, NoObserver{}) }
