package refset

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/refsetdb/refset/internal/txview"
)

// A hand-over completed inside a unit of work that refset began (InTx, or a savepoint
// of one) stands only if the unit commits. The Acquired is refset's own state, not the
// database's, so the unit keeps, beside its transaction, what undoes that state: a
// rollback (an error, a panic, a refused statement, a commit that failed, a conflict
// InTx runs the function again for) makes the Acquired usable again, as a failed
// Complete leaves it, and a unit run again can complete it in its new transaction. A
// COMMIT whose outcome is unknown (ErrCommitUnknown) undoes nothing: the hand-over may
// have happened, and is not offered again.

// undoKey is the key of a unit's undoScope among its context's values.
type undoKey struct{}

// undoScope is what a unit of work, or a savepoint of one, undoes in memory when it
// rolls back.
type undoScope struct {
	tx     *txview.View // the unit's Tx
	outer  *undoScope   // the scope of the unit around it, if any
	mu     sync.Mutex
	undoes []func()
	// keptIn is the scope the unit's work went to once it ended kept (a savepoint's
	// into; nil for a unit that committed, or one that did not keep it); set before
	// ended.
	keptIn *undoScope
	ended  atomic.Bool
}

// open is the scope whose unit's end decides whether the work of u's unit stands:
// u while its unit runs, the one it was kept in after, and nil once that is decided
// (committed, or undone).
func (u *undoScope) open() *undoScope {
	for u != nil && u.ended.Load() {
		u = u.keptIn
	}
	return u
}

// within reports whether ctx runs inside the unit of work whose scope is u (in it,
// or in a savepoint of it).
func within(ctx context.Context, u *undoScope) bool {
	for s, _ := ctx.Value(undoKey{}).(*undoScope); s != nil; s = s.outer {
		if s == u {
			return true
		}
	}
	return false
}

// withUndo returns ctx, the context a unit of work gives its function (carrying view
// as the unit's Tx), with the unit's undoScope.
func withUndo(ctx context.Context, view *txview.View) (context.Context, *undoScope) {
	outer, _ := ctx.Value(undoKey{}).(*undoScope)
	u := &undoScope{tx: view, outer: outer}
	return context.WithValue(ctx, undoKey{}, u), u
}

// undoScopeOf is the scope of the unit of work whose Tx is tx, among those ctx
// carries, or nil: a caller's own transaction has none.
func undoScopeOf(ctx context.Context, tx Tx) *undoScope {
	v, ok := tx.(*txview.View)
	if !ok {
		return nil
	}
	for u, _ := ctx.Value(undoKey{}).(*undoScope); u != nil; u = u.outer {
		if u.tx == v {
			return u
		}
	}
	return nil
}

// onRollback makes fn run if the unit rolls back.
func (u *undoScope) onRollback(fn func()) {
	u.mu.Lock()
	u.undoes = append(u.undoes, fn)
	u.mu.Unlock()
}

// end ends the unit: kept says its work stands (it committed, or it was a savepoint
// that was released, whose work now stands or falls with the unit around it, into
// passes its undoes; nil: the transaction committed). A unit that did not keep its
// work undoes it, the latest first.
func (u *undoScope) end(kept bool, into *undoScope) {
	u.mu.Lock()
	undoes := u.undoes
	u.undoes = nil
	u.mu.Unlock()
	if kept {
		u.keptIn = into
	}
	u.ended.Store(true)
	if kept {
		if into != nil {
			into.mu.Lock()
			into.undoes = append(into.undoes, undoes...)
			into.mu.Unlock()
		}
		return
	}
	for i := len(undoes) - 1; i >= 0; i-- {
		undoes[i]()
	}
}
