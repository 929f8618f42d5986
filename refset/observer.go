package refset

import "github.com/refsetdb/refset/refsetdriver"

// Observer is told what refset did, for metrics: package otelrefset turns it into
// OpenTelemetry instruments, and this package imports no metrics library. Give one to a
// store's database (the stores' Options.Observer); without it nothing is told.
//
// Its methods, with what each is told, are listed at refsetdriver.Observer.
//
// Its methods run on the caller's goroutine and must return quickly: they sit on the
// paths of Add and Complete. A call made outside a unit of work is told once refset's
// own transaction has ended; one made inside a unit (CompleteTx, AddTx, any call with
// the unit's context) is told while the unit's transaction is still open, and that
// transaction may yet roll back. Embed NoObserver to implement only some of them.
type Observer = refsetdriver.Observer

// NoObserver is an Observer that does nothing: what a database without one has, and
// a base to embed for an observer that wants only some calls.
type NoObserver = refsetdriver.NoObserver
