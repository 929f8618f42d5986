package engine

import (
	"context"
	"fmt"

	"github.com/refsetdb/refset/internal/sentinel"
	"github.com/refsetdb/refset/refsetdriver"
)

// refuseOwnWriter fails with ErrInUnitOfWork a Begin that would wait for the writer
// of the caller's own unit of work: the database writes through one connection
// (Config.WriterBusy), it is busy, and the call is made on a unit's goroutine, inside
// its function, with a context that carries no unit (refsetdriver.OutsideItsUnit).
// The unit holds the writer until its function returns, which waits for this call:
// without the refusal the call would wait until its context ends, for ever with
// context.Background(). A Begin that finds the writer free pays one look at it.
func (e *Engine) refuseOwnWriter(ctx context.Context) error {
	if e.c.WriterBusy == nil || !e.c.WriterBusy() || !refsetdriver.OutsideItsUnit(ctx) {
		return nil
	}
	return fmt.Errorf("%s: begin: %w: the call is made inside the function of refset.InTx with a context that does not carry the unit (the one InTx was given, or context.Background()), so it would begin a transaction of its own and wait for the writer the unit holds until the context ends; pass the context InTx gave its function, or make the call after InTx returns",
		e.c.Name, sentinel.ErrInUnitOfWork)
}
