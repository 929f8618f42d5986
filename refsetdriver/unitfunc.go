package refsetdriver

import (
	"context"
	"runtime"
	"sync/atomic"
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

// A unit of work on PostgreSQL holds one connection of its database's pool until its
// function returns. A call made on the unit's goroutine with a context that carries
// no unit of that database takes a connection of the same pool: when every
// connection the pool may open is held by units of work on the calling goroutine,
// none is freed until the call returns, and the call would wait until its context
// ends. The store tells that case from a pool busy with other goroutines' work (which
// frees its connections) by counting the units on the goroutine's stack that hold
// the pool's connections: RunUnitFuncOf runs a unit's function in frames that name
// its pool (a PoolTag, in the return addresses of two functions, one for each bit),
// which UnitsOnStack reads back.

// PoolTag names a pool whose connections units of work hold, on the stacks of their
// goroutines (RunUnitFuncOf, UnitsOnStack). Zero names none.
type PoolTag uint64

// poolTags counts the tags NewPoolTag gave out.
var poolTags atomic.Uint64

// NewPoolTag is a tag no other pool has.
func NewPoolTag() PoolTag { return PoolTag(poolTags.Add(1)) }

// PoolTagged is a Driver whose database's units of work each hold a connection of a
// pool, named by PoolTag (zero: none), that its calls outside a unit take too.
type PoolTagged interface {
	PoolTag() PoolTag
}

// PoolReader is a PoolTagged Driver whose database's Reader is that pool.
// ReaderOutside is the Reader for a read outside any unit of work of the database:
// Reader itself, or, when the read would wait for a connection that only units of
// work on the calling goroutine could free (UnitsOnStack), a Querier whose every
// call fails at once with ErrInUnitOfWork, changing nothing. ReaderFor and
// ReadReplicaFirst read there.
type PoolReader interface {
	ReaderOutside() Querier
	// RefuseOwnPool is the error a call (op names it) that takes a connection of the
	// pool outside any unit of work of the database fails with at once when it would
	// wait for one that only units of work on the calling goroutine could free, as
	// ReaderOutside's refusing Querier does; nil otherwise.
	RefuseOwnPool(op string) error
}

// RefuseOwnPool fails with ErrInUnitOfWork, when db's Driver is a PoolReader that
// refuses it, a call (op names it) that takes a connection of db's pool outside any of
// its units of work on its own, not through ReaderOutside (a statement prepared on
// Driver.Pool): it would wait for a connection that only units of work on the calling
// goroutine could free. nil otherwise, and for any other database.
func RefuseOwnPool(db Database, op string) error {
	if r, ok := db.Driver().(PoolReader); ok {
		return r.RefuseOwnPool(op)
	}
	return nil
}

// readerOutside is where a read of db outside any of its units of work goes:
// db.Reader(), or its driver's ReaderOutside (PoolReader).
func readerOutside(db Database) Querier {
	if r, ok := db.Driver().(PoolReader); ok {
		return r.ReaderOutside()
	}
	return db.Reader()
}

// RunUnitFuncOf is RunUnitFunc for a unit of work on db: when db's Driver is
// PoolTagged, fn runs in frames that name its pool, which UnitsOnStack counts while
// fn runs. They cost two calls for each bit of the tag.
func RunUnitFuncOf(db Database, fn func() error) error {
	if p, ok := db.Driver().(PoolTagged); ok {
		if tag := p.PoolTag(); tag != 0 {
			return runTagged(uint64(tag), fn)
		}
	}
	return RunUnitFunc(fn)
}

// runTagged runs fn through RunUnitFunc below one frame of tagBit0 or tagBit1 for
// each bit of tag, the lowest outermost: read from fn's frame outwards, the frames
// name the highest bit first.
//
//go:noinline
func runTagged(tag uint64, fn func() error) error {
	switch {
	case tag == 0:
		return RunUnitFunc(fn)
	case tag&1 == 0:
		return tagBit0(tag>>1, fn)
	default:
		return tagBit1(tag>>1, fn)
	}
}

//go:noinline
func tagBit0(tag uint64, fn func() error) error { return runTagged(tag, fn) }

//go:noinline
func tagBit1(tag uint64, fn func() error) error { return runTagged(tag, fn) }

// The return addresses of runTagged's call of RunUnitFunc, and of tagBit0's and
// tagBit1's calls of runTagged: the frames of a tagged unit's function.
var runTaggedReturn, tagBit0Return, tagBit1Return = func() (tagged, bit0, bit1 uintptr) {
	probe := func(run func(uint64, func() error) error) (tagged, bit uintptr) {
		var pc [3]uintptr
		_ = run(0, func() error {
			runtime.Callers(2, pc[:]) // RunUnitFunc, runTagged, then run
			return nil
		})
		return pc[1], pc[2]
	}
	tagged, bit0 = probe(tagBit0)
	_, bit1 = probe(tagBit1)
	return tagged, bit0, bit1
}()

// UnitsOnStack is how many units of work whose pool tag names run their functions
// (RunUnitFuncOf) on the calling goroutine: each holds one connection of that pool
// until its function returns, which it cannot before the call asking returns. It
// reads the goroutine's return addresses (a microsecond or so, more on a deep stack):
// ask it only where a call would wait for a connection.
func UnitsOnStack(tag PoolTag) int {
	if tag == 0 {
		return 0
	}
	pcs := make([]uintptr, 64)
	n := runtime.Callers(2, pcs)
	for n == len(pcs) {
		pcs = make([]uintptr, 2*len(pcs))
		n = runtime.Callers(2, pcs)
	}
	pcs = pcs[:n]
	units := 0
	for i, pc := range pcs {
		if pc != runUnitFuncReturn || i+1 >= n || pcs[i+1] != runTaggedReturn {
			continue
		}
		var named uint64
		for j := i + 2; j < n && (pcs[j] == tagBit0Return || pcs[j] == tagBit1Return); j += 2 {
			named <<= 1
			if pcs[j] == tagBit1Return {
				named |= 1
			}
		}
		if PoolTag(named) == tag {
			units++
		}
	}
	return units
}
