package engine

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"
	"github.com/refsetdb/refset/internal/sentinel"
	"github.com/refsetdb/refset/refsetdriver"
)

// ownUnitFix is what every refusal of a call that would wait for its own unit of
// work tells the caller to do.
const ownUnitFix = "pass the context InTx gave its function, or make the call after InTx returns"

// refuseOwnWriter fails with ErrInUnitOfWork a Begin that would wait for the writer
// of the caller's own unit of work: the database writes through one connection
// (Config.WriterBusy), it is busy, and the call is made on a unit's goroutine, inside
// its function, with a context that carries no unit (refsetdriver.OutsideItsUnit).
// The unit holds the writer until its function returns, which waits for this call:
// without the refusal the call would wait until its context ends, for ever with
// context.Background(). A Begin that finds the writer free pays one look at it. On a
// database whose units hold connections of a pool (Config.OwnUnitsHoldPool), it
// refuses a Begin that would wait for one of them (RefuseOwnPool).
func (e *Engine) refuseOwnWriter(ctx context.Context) error {
	if e.c.WriterBusy == nil || !e.c.WriterBusy() || !refsetdriver.OutsideItsUnit(ctx) {
		return e.RefuseOwnPool("begin")
	}
	return fmt.Errorf("%s: begin: %w: the call is made inside the function of refset.InTx with a context that does not carry the unit (the one InTx was given, or context.Background()), so it would begin a transaction of its own and wait for the writer the unit holds until the context ends; %s",
		e.c.Name, sentinel.ErrInUnitOfWork, ownUnitFix)
}

// RefuseOwnPool fails with ErrInUnitOfWork, changing nothing, a call (op names it)
// that would take a connection of a pool none of whose connections only units of
// work on the calling goroutine could free (Config.OwnUnitsHoldPool): those units
// hold them until their functions return, which wait for this call, so without the
// refusal it would wait until its context ends, for ever with context.Background().
// A call made with a unit's own context joins the unit and never gets here: this one
// was made with another (the one InTx was given, context.Background()). A call that
// finds a connection free, or the pool busy with other goroutines' work, pays one
// look at the pool's counts.
func (e *Engine) RefuseOwnPool(op string) error {
	if e == nil || e.c.OwnUnitsHoldPool == nil || !e.c.OwnUnitsHoldPool() {
		return nil
	}
	return fmt.Errorf("%s: %s: %w: the call is made inside the function of refset.InTx with a context that does not carry the unit (the one InTx was given, or context.Background()), so it would take a connection of the pool, all of which units of work on this goroutine hold until their functions return, and wait for one until the context ends; %s",
		e.c.Name, op, sentinel.ErrInUnitOfWork, ownUnitFix)
}

// ReaderOutside is Reading(pool, driverName) for a read made outside any unit of
// work of the database, but when the read would wait for a connection that only units
// of work on the calling goroutine could free (RefuseOwnPool): then a pool on which
// every call fails at once with that refusal, changing nothing.
func (e *Engine) ReaderOutside(pool *sqlx.DB, driverName string) *sqlx.DB {
	if !e.Closed() {
		if err := e.RefuseOwnPool("read"); err != nil {
			return failingPool(driverName, err)
		}
	}
	return e.Reading(pool, driverName)
}
