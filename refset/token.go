package refset

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"
)

// A reference moves through a hand-over in three steps, each its own type, so the
// compiler checks the order:
//
//	tok.Release(cmds...)  -> *Released   the giver lets go (its commands are recorded, not run)
//	rel.Acquire(cmds...)  -> *Acquired   the taker takes it (likewise)
//	acq.Complete(ctx)     -> *RefToken   all commands run in one transaction
//
// Go cannot move ownership, so each step remembers it was taken: a second Release,
// Acquire or Complete of the same token fails with ErrTokenConsumed and runs nothing.

// step is where a lineage (a token and the transfer values made from it) stands.
type step uint8

const (
	stepHeld       step = iota // the RefToken is usable
	stepReleased               // the Released is usable
	stepAcquired               // the Acquired is usable
	stepCompleting             // a Complete is running
	stepDone                   // the hand-over committed; a new RefToken carries on
)

type lineage struct {
	mu   sync.Mutex
	step step
	// tentative is the scope of the unit of work whose hand-over made the token, when
	// one refset began did (see complete): until that unit has committed, the
	// hand-over may yet be undone, and the lineage's own hand-over runs only inside it.
	tentative *undoScope
}

func (l *lineage) advance(from, to step) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.step != from {
		return false
	}
	l.step = to
	return true
}

// end makes the lineage unusable, whatever step it stands at: its token came from a
// hand-over that was undone.
func (l *lineage) end() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.step = stepDone
}

func (l *lineage) is(s step) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.step == s
}

// completer is the set a token came from: it runs the commands of a hand-over.
type completer[ID comparable] interface {
	runCommands(ctx context.Context, tx Tx, id ID, cmds []Command[ID]) error
	observer() Observer
	// undoScope is the scope of the unit of work refset began that a hand-over run
	// with ctx and tx (as runCommands takes them) joined, or nil.
	undoScope(ctx context.Context, tx Tx) *undoScope
}

// ref is what a token and each step of its hand-over carry.
type ref[ID comparable] struct {
	id   ID
	set  completer[ID]
	lin  *lineage
	cmds []Command[ID] // the commands recorded so far
}

// ID is the ID of the referenced object.
func (r *ref[ID]) ID() ID { return r.id }

// hand is a RefToken, a Released or an Acquired (all of them structs of one ref,
// which convert to each other), on its way to the next step of a hand-over. A nil
// hand is a nil token or step.
type hand[ID comparable] struct{ ref[ID] }

// take moves the hand-over from one step to the next, once cmds, the commands the
// step records, are all non-nil. op names the step in errors.
func (h *hand[ID]) take(op string, from, to step, cmds []Command[ID]) error {
	if h == nil || h.lin == nil {
		return opError(op, ErrInvalidToken, nil)
	}
	if err := checkCommands(cmds); err != nil {
		return err
	}
	if !h.lin.advance(from, to) {
		return opError(op+" "+idText(h.id), ErrTokenConsumed, nil)
	}
	return nil
}

// next takes the step and returns what the next one carries: the commands recorded
// so far, then cmds, each marked with op, the side of the hand-over it is on, for
// its errors.
func (h *hand[ID]) next(op string, from, to step, cmds []Command[ID]) (*hand[ID], error) {
	if err := h.take(op, from, to, cmds); err != nil {
		return nil, err
	}
	all := append(make([]Command[ID], 0, len(h.cmds)+len(cmds)), h.cmds...)
	for _, c := range cmds {
		all = append(all, sided[ID]{Command: c, side: op})
	}
	return &hand[ID]{ref[ID]{id: h.id, set: h.set, lin: h.lin, cmds: all}}, nil
}

// RefToken is a reference to an object known to be in a set when the token was made.
// It is safe to send to another goroutine; it does not keep the object alive (a
// persisted reference row does). Pass it on with Release.
type RefToken[ID comparable] struct{ ref[ID] }

func newToken[ID comparable](id ID, set completer[ID]) *RefToken[ID] {
	return &RefToken[ID]{ref[ID]{id: id, set: set, lin: &lineage{}}}
}

func (t *RefToken[ID]) String() string { return "RefToken(" + idText(t.id) + ")" }

// Release starts a hand-over: cmds will run, before the taker's, when it completes.
// The token is consumed. Errors: ErrInvalidToken (nil), ErrInvalidCommand (a nil
// command), ErrTokenConsumed.
func (t *RefToken[ID]) Release(cmds ...Command[ID]) (*Released[ID], error) {
	next, err := (*hand[ID])(t).next("release", stepHeld, stepReleased, cmds)
	return (*Released[ID])(next), err
}

// Released is a reference on its way from one component to another. Send it to the
// taker, which calls Acquire.
type Released[ID comparable] struct{ ref[ID] }

// Acquire records the taker's commands, to run after the giver's. The Released is
// consumed. Errors: those of Release.
func (r *Released[ID]) Acquire(cmds ...Command[ID]) (*Acquired[ID], error) {
	next, err := (*hand[ID])(r).next("acquire", stepReleased, stepAcquired, cmds)
	return (*Acquired[ID])(next), err
}

// Acquired is a hand-over ready to commit.
type Acquired[ID comparable] struct{ ref[ID] }

// Complete runs the release commands and then the acquire commands in one new
// transaction and commits it, returning the taker's RefToken. If any command fails
// nothing is committed, the error is returned and the Acquired stays usable, so the
// caller may fix the cause and Complete again. If a command panics the transaction
// rolls back, the Acquired stays usable, and the panic goes on. Once Complete
// succeeds, every later Complete fails with ErrTokenConsumed and runs nothing.
//
// A token that a Complete inside a unit of work gave is the unit's until it commits
// (the unit may yet undo that hand-over): its own hand-over completes inside the unit,
// with its context, or once the unit has committed; apart from the unit while it
// runs, Complete fails with ErrInvalidToken and runs nothing.
//
// Errors: ErrTokenConsumed, ErrInvalidToken, ErrInvalidCommand (a command tried to
// end the transaction), ErrNotFound (a reference to a missing object, or an Exec
// command that affected fewer rows than it wants), ErrReferenced, ErrDuplicate,
// ErrConstraint, ErrStatement, ErrConflict (after retries), ErrUnavailable (with
// ErrCommitUnknown if the connection was lost while committing and no server could
// tell the outcome: the hand-over may then have committed, though the Acquired is
// usable again), ErrTimeout, ErrClosed,
// the context's error, and whatever a command returned.
func (a *Acquired[ID]) Complete(ctx context.Context) (*RefToken[ID], error) {
	return a.complete(ctx, nil)
}

// CompleteTx runs the commands inside the caller's transaction tx, under a savepoint:
// if a command fails or panics only the hand-over is undone, tx stays usable, and the
// Acquired stays usable. Errors: those of Complete, and ErrInvalidTx when tx is nil
// or a connection pool. On success in a transaction of the caller's own (a *sql.Tx) the
// token is consumed at once, whether or not tx commits later; if tx rolls back, Upgrade
// the ID again for a new token. In the Tx a unit of work gave (InTx's), as for Complete
// with the unit's context, the hand-over stands or falls with the unit: if the unit
// rolls back (or InTx runs its function again), the Acquired is usable again and the
// token Complete returned is spent.
func (a *Acquired[ID]) CompleteTx(ctx context.Context, tx Tx) (*RefToken[ID], error) {
	if err := checkTx(tx); err != nil {
		return nil, err
	}
	return a.complete(ctx, tx)
}

func (a *Acquired[ID]) complete(ctx context.Context, tx Tx) (*RefToken[ID], error) {
	if a != nil && a.lin != nil {
		if u := a.lin.tentative.open(); u != nil && !within(ctx, u) {
			// Its token came from a hand-over of a unit of work that has not
			// committed: completed apart from that unit, this one could stand while
			// that one is undone, and the Acquired it undoes would hand the object
			// over a second time.
			return nil, opError("complete "+idText(a.id), ErrInvalidToken,
				errors.New("its token came from a hand-over in a unit of work that has not committed yet: complete it inside that unit (with its context), or after the unit commits"))
		}
	}
	if err := (*hand[ID])(a).take("complete", stepAcquired, stepCompleting, nil); err != nil {
		return nil, err
	}
	done := false
	defer func() {
		// A failed or panicking hand-over rolled back: the Acquired is usable again.
		if !done {
			a.lin.advance(stepCompleting, stepAcquired)
		}
	}()
	start := time.Now()
	err := a.set.runCommands(ctx, tx, a.id, a.cmds)
	took := time.Since(start)
	if err != nil {
		a.set.observer().HandedOver(ctx, took, err)
		return nil, wrapOp("complete "+idText(a.id), err)
	}
	done = true
	a.lin.advance(stepCompleting, stepDone)
	tok := newToken(a.id, a.set)
	if u := a.set.undoScope(ctx, tx); u != nil {
		tok.lin.tentative = u
		// In a unit of work refset began, the hand-over stands only if the unit
		// commits: if it rolls back, the Acquired is usable again, and the token it
		// gave names a hand-over that did not happen.
		u.onRollback(func() {
			tok.lin.end()
			a.lin.advance(stepDone, stepAcquired)
		})
	}
	// Told once the Acquired is spent: an Observer that panics now cannot leave a
	// hand-over that committed to be made again.
	a.set.observer().HandedOver(ctx, took, nil)
	return tok, nil
}

func checkCommands[ID comparable](cmds []Command[ID]) error {
	for i, c := range cmds {
		if isNil(c) {
			return opError(fmt.Sprintf("command %d is nil", i), ErrInvalidCommand, nil)
		}
	}
	return nil
}

// isNil reports whether c is nil: a nil interface, or one that holds a nil function
// (CommandFunc(nil)) or a nil pointer, which would panic when it ran.
func isNil(c any) bool {
	if c == nil {
		return true
	}
	switch v := reflect.ValueOf(c); v.Kind() {
	case reflect.Func, reflect.Pointer:
		return v.IsNil()
	}
	return false
}
