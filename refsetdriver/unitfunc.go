package refsetdriver

import (
	"context"
	"runtime"
)

// A unit of work is its function's goroutine's: refset.InTx runs the function on the
// goroutine that called it, and ends the unit when the function returns. A call that
// this goroutine makes inside the function with a context that carries no unit (the
// context InTx was given, context.Background()) does not join the unit; on SQLite it
// begins a transaction of its own, which waits for the one writer, which the unit
// holds until the function returns, which it cannot while it waits: the call would
// wait until its context ends. No other goroutine's work looks like that, so the
// store refuses the call at once (OutsideItsUnit) instead.

// RunUnitFunc runs fn, the function of a unit of work (refset.InTx's, run once its
// transaction began), on the calling goroutine, in a frame that OutsideItsUnit finds
// on the goroutine's stack while fn runs. It costs a call: nothing is recorded.
//
//go:noinline
func RunUnitFunc(fn func() error) error {
	return fn()
}

// runUnitFuncReturn is the return address of RunUnitFunc's one call, fn(): a frame
// of a stack that holds it is RunUnitFunc's, running a unit's function.
var runUnitFuncReturn = func() uintptr {
	var pc [1]uintptr
	_ = RunUnitFunc(func() error {
		runtime.Callers(2, pc[:]) // skipping Callers and this function: RunUnitFunc
		return nil
	})
	return pc[0]
}()

// OutsideItsUnit reports whether a call made with ctx is made by the goroutine of a
// unit of work, inside the unit's function (RunUnitFunc), with a context that carries
// no unit that runs (none, or only units that ended): a context other than the one
// the unit gave its function. A store whose one writer is busy asks it before waiting
// for the writer: on the unit's goroutine, the wait is for the unit itself. It reads
// the return addresses on the goroutine's stack (half a microsecond or so): ask it
// only where the call would wait.
//
// It does not tell which database the unit is of: a call on a SQLite database made
// inside the function of a unit of another database, with a context that carries no
// unit, is taken for one as well when the writer is busy. The context to pass there
// is the function's too (with it the call runs on its own, as it should).
func OutsideItsUnit(ctx context.Context) bool {
	for u, _ := ctx.Value(unitKey{}).(*unit); u != nil; u = u.outer {
		if !u.ended.Load() {
			return false
		}
	}
	var pcs [64]uintptr
	for skip := 2; ; skip += len(pcs) {
		n := runtime.Callers(skip, pcs[:])
		for _, pc := range pcs[:n] {
			if pc == runUnitFuncReturn {
				return true
			}
		}
		if n < len(pcs) {
			return false
		}
	}
}
