package refsetdriver

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/refsetdb/refset/internal/sentinel"
)

// A unit of work (refset.InTx, and the savepoint of a *Tx call) puts its transaction
// in the context it gives the code it runs, so that a call of refset made with that
// context finds it: a write joins it under a savepoint instead of beginning a
// transaction of its own (which on SQLite would wait for the writer the unit holds,
// and on PostgreSQL commit outside the unit), and a read runs on it instead of taking
// a second connection from a pool the unit may have emptied. A store's Begin refuses
// a context that carries a unit of its database (ErrInUnitOfWork): whatever reaches
// it did not join.

type unitKey struct{}

// unit is one unit of work in a context: the transaction, the database it belongs
// to, the units around it (of this database when it is a savepoint of one, or of
// others), and what to do once it commits.
//
// It is itself the context that carries it, made from the one it was given: one
// allocation for every unit of work, where context.WithValue would add one.
type unit struct {
	context.Context
	db       Database
	tx       Tx
	outer    *unit
	ended    atomic.Bool
	busy     atomic.Bool // a call runs in the unit (EnterUnit)
	mu       sync.Mutex
	onCommit []func()
	locals   map[any]any // UnitLocal's values
}

// WithUnit returns ctx carrying tx, a transaction of db, as the unit of work calls
// made with it join, and the function that ends it. Once end is called the context
// carries the unit no more (a goroutine that outlives the unit begins transactions of
// its own). end(true) says the unit's work stands: the functions given to AfterCommit
// then run, or, when the unit is a savepoint of an enclosing unit of db, pass to that
// one, to run when it commits. end(false) drops them.
func WithUnit(ctx context.Context, db Database, tx Tx) (context.Context, func(committed bool)) {
	outer, _ := ctx.Value(unitKey{}).(*unit)
	u := &unit{Context: ctx, db: db, tx: tx, outer: outer}
	return u, u.end
}

// Value is the unit for unitKey, and ctx's value for any other key.
func (u *unit) Value(key any) any {
	if key == (unitKey{}) {
		return u
	}
	return u.Context.Value(key)
}

func (u *unit) end(committed bool) {
	u.ended.Store(true)
	u.mu.Lock()
	fns, locals := u.onCommit, u.locals
	u.onCommit, u.locals = nil, nil
	u.mu.Unlock()
	if !committed {
		return
	}
	if enclosing := u.outer.find(u.db); enclosing != nil {
		enclosing.mu.Lock()
		enclosing.onCommit = append(enclosing.onCommit, fns...)
		for k, v := range locals {
			enclosing.setLocal(k, v)
		}
		enclosing.mu.Unlock()
		return
	}
	for _, fn := range fns {
		fn()
	}
}

// find is the innermost unit of db from u outwards that has not ended, or nil.
func (u *unit) find(db Database) *unit {
	for ; u != nil; u = u.outer {
		if !u.ended.Load() && sameDatabase(u.db, db) {
			return u
		}
	}
	return nil
}

// UnitTx is the transaction of the unit of work on db that ctx carries, if any.
func UnitTx(ctx context.Context, db Database) (Tx, bool) {
	if db == nil {
		return nil, false
	}
	u, _ := ctx.Value(unitKey{}).(*unit)
	if u = u.find(db); u == nil {
		return nil, false
	}
	return u.tx, true
}

// EnterUnit marks the unit of work on db that ctx carries as running a call, until
// leave is called; ok is false when ctx carries none. A unit is one goroutine's: its
// transaction is one connection, which runs one statement at a time, and savepoints of
// two calls at once would undo each other's work. A call while another runs in the
// same unit fails, changing nothing, with ErrInvalidTx (refset's). The calls a running
// call makes itself (its Commands') run in a savepoint of its own, a unit of its own.
func EnterUnit(ctx context.Context, db Database, op string) (leave func(), ok bool, err error) {
	u, _ := ctx.Value(unitKey{}).(*unit)
	if u = u.find(db); u == nil {
		return func() {}, false, nil
	}
	if !u.busy.CompareAndSwap(false, true) {
		return nil, true, fmt.Errorf("%w: %s: another call runs in this unit of work; a unit is one goroutine's (run its calls one after another, or give each goroutine a unit of its own)", sentinel.ErrInvalidTx, op)
	}
	return func() { u.busy.Store(false) }, true, nil
}

// AfterCommit runs fn once the unit of work on db that ctx carries commits (never,
// if it rolls back, or if it is a savepoint of a caller's own transaction, whose
// commit refset does not see), and reports whether ctx carries one.
func AfterCommit(ctx context.Context, db Database, fn func()) bool {
	u, _ := ctx.Value(unitKey{}).(*unit)
	if u = u.find(db); u == nil {
		return false
	}
	u.mu.Lock()
	u.onCommit = append(u.onCommit, fn)
	u.mu.Unlock()
	return true
}

// UnitLocal is the value SetUnitLocal gave key in the unit of work on db that ctx
// carries, or in a unit it is a savepoint of; a savepoint's values pass to the unit
// around it when it is released, and go when it rolls back.
func UnitLocal(ctx context.Context, db Database, key any) (any, bool) {
	u, _ := ctx.Value(unitKey{}).(*unit)
	for u = u.find(db); u != nil; u = u.outer.find(db) {
		u.mu.Lock()
		v, ok := u.locals[key]
		u.mu.Unlock()
		if ok {
			return v, true
		}
	}
	return nil, false
}

// SetUnitLocal gives key the value v in the unit of work on db that ctx carries, and
// reports whether ctx carries one.
func SetUnitLocal(ctx context.Context, db Database, key, v any) bool {
	u, _ := ctx.Value(unitKey{}).(*unit)
	if u = u.find(db); u == nil {
		return false
	}
	u.mu.Lock()
	u.setLocal(key, v)
	u.mu.Unlock()
	return true
}

// setLocal sets a value of u's; u.mu is held.
func (u *unit) setLocal(key, v any) {
	if u.locals == nil {
		u.locals = make(map[any]any)
	}
	u.locals[key] = v
}

// ReaderFor is where a read of db made with ctx runs: the transaction of the unit of
// work on db that ctx carries, which sees what the unit wrote and needs no second
// connection, or db.Reader() outside any (or, when every connection of that pool is
// held by units of work on the calling goroutine, a Querier that refuses the read:
// PoolReader).
func ReaderFor(ctx context.Context, db Database) Querier {
	if tx, ok := UnitTx(ctx, db); ok {
		return tx
	}
	return readerOutside(db)
}

// sameDatabase reports whether a and b are one database. Stores' databases are
// pointers; a value of a type that cannot be compared is never the same.
func sameDatabase(a, b Database) bool {
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta.Comparable() && a == b
}

// RefuseUnit fails with ErrInUnitOfWork (refset's), changing nothing, when ctx
// carries a unit of work on db: for work that commits on its own (clean-up's passes,
// migrations) and so cannot join one. what names the work in the error.
func RefuseUnit(ctx context.Context, db Database, what string) error {
	if _, ok := UnitTx(ctx, db); ok {
		return fmt.Errorf("%w: %s commits on its own; make the call before InTx or after it returns", sentinel.ErrInUnitOfWork, what)
	}
	return nil
}
