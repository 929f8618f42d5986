// Package units holds the analyzer's cases: each call a diagnostic is wanted for
// says so in a want comment; every other call must pass unreported.
package units

import (
	"context"
	"time"

	"github.com/refsetdb/refset/blockmanager"
	"github.com/refsetdb/refset/refset"
)

type item struct{ Key string }

func (i item) ID() string { return i.Key }

var set *refset.RefSet[item, string]

// The slip the analyzer is for: InTx's function names its context otherwise, and
// the calls use the one InTx was given.
func outerContext(ctx context.Context, db refset.Database) error {
	return refset.InTx(ctx, db, func(c context.Context, tx refset.Tx) error {
		_, err := set.Add(ctx, item{"a"}) // want `refset call set.Add made with context ctx inside the unit of work of refset.InTx; use the context refset.InTx passes its function \(parameter c\), or the call runs outside the unit`
		if err != nil {
			return err
		}
		_, err = set.Add(c, item{"b"}) // the unit's own: joins it
		return err
	})
}

// A function whose context is _ has none of its own to pass.
func blankParameter(ctx context.Context, db refset.Database) error {
	return refset.InTx(ctx, db, func(_ context.Context, tx refset.Tx) error {
		_, err := set.Add(ctx, item{"a"}) // want `made with context ctx inside the unit of work of refset.InTx; name the context refset.InTx passes its function \(the function's first parameter is _ or unnamed\) and use it`
		return err
	})
}

func unnamedParameters(ctx context.Context, db refset.Database) error {
	return refset.InTx(ctx, db, func(context.Context, refset.Tx) error {
		_, err := set.Add(context.Background(), item{"a"}) // want `made with context context.Background\(\) inside`
		return err
	})
}

// A context made from the outer one is not the unit's either; one made from the
// unit's is, through assignments.
func derivedContexts(ctx context.Context, db refset.Database) error {
	return refset.InTx(ctx, db, func(c context.Context, tx refset.Tx) error {
		fromOuter, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if _, err := set.Add(fromOuter, item{"a"}); err != nil { // want `made with context fromOuter inside`
			return err
		}
		if _, err := set.Add(context.WithoutCancel(ctx), item{"b"}); err != nil { // want `made with context context.WithoutCancel\(ctx\) inside`
			return err
		}
		fromOwn, cancel2 := context.WithTimeout(c, time.Second)
		defer cancel2()
		again := fromOwn
		var alsoOwn = context.WithValue(again, item{}, 1)
		alsoOwn = context.WithoutCancel(alsoOwn) // made from itself: still the unit's
		if _, err := set.Add(alsoOwn, item{"c"}); err != nil {
			return err
		}
		if _, err := set.Add(context.WithoutCancel(c), item{"d"}); err != nil {
			return err
		}
		changed := c
		changed = context.TODO()              // no longer the unit's
		_, err := set.Add(changed, item{"e"}) // want `made with context changed inside`
		return err
	})
}

// A goroutine started inside the unit's function is checked as the function is:
// with the outer context its work runs apart from the unit (and on SQLite waits for
// the writer the unit holds, for ever if the function waits for the goroutine).
func goroutineInside(ctx context.Context, db refset.Database) error {
	return refset.InTx(ctx, db, func(c context.Context, tx refset.Tx) error {
		done := make(chan error, 2)
		go func() {
			_, err := set.Add(ctx, item{"a"}) // want `made with context ctx inside the unit of work of refset.InTx`
			done <- err
		}()
		go func() {
			_, err := set.Add(c, item{"b"}) // the unit's context (one call at a time)
			done <- err
		}()
		return <-done
	})
}

// A goroutine's literal called with a context: its parameter holds what it is
// called with.
func goroutineWithParameter(ctx context.Context, db refset.Database) error {
	return refset.InTx(ctx, db, func(c context.Context, tx refset.Tx) error {
		done := make(chan error, 2)
		go func(gctx context.Context, key string) {
			_, err := set.Add(gctx, item{key}) // want `made with context gctx inside the unit of work of refset.InTx`
			done <- err
		}(ctx, "a")
		go func(gctx context.Context) {
			_, err := set.Add(gctx, item{"b"}) // the unit's context, passed in
			done <- err
		}(c)
		return <-done
	})
}

// A function literal inside with a context parameter of its own may use it: what
// it is called with is not known here.
func callbackInside(ctx context.Context, db refset.Database) error {
	return refset.InTx(ctx, db, func(c context.Context, tx refset.Tx) error {
		return retry(c, func(attempt context.Context) error {
			_, err := set.Add(attempt, item{"a"})
			return err
		})
	})
}

func retry(ctx context.Context, fn func(context.Context) error) error { return fn(ctx) }

// A call told where its statements run (the unit's Tx, a *Tx form) is in the unit
// whatever its context.
func placedCalls(ctx context.Context, db refset.Database) error {
	return refset.InTx(ctx, db, func(c context.Context, tx refset.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM pending`); err != nil {
			return err
		}
		_, err := set.AddTx(ctx, tx, item{"a"})
		return err
	})
}

// InTx inside InTx: the inner function's own context is its parameter; the outer
// unit's, passed inside, finds the outer unit busy with the savepoint.
func nestedUnits(ctx context.Context, db refset.Database) error {
	return refset.InTx(ctx, db, func(c context.Context, tx refset.Tx) error {
		return refset.InTx(c, db, func(inner context.Context, tx refset.Tx) error {
			if _, err := set.Add(inner, item{"a"}); err != nil {
				return err
			}
			_, err := set.Add(c, item{"b"}) // want `made with context c inside the unit of work of refset.InTx; use the context refset.InTx passes its function \(parameter inner\)`
			return err
		})
	})
}

// The call that runs InTx itself, inside a unit, with the outer context.
func nestedWithOuter(ctx context.Context, db refset.Database) error {
	return refset.InTx(ctx, db, func(c context.Context, tx refset.Tx) error {
		return refset.InTx(ctx, db, func(inner context.Context, tx refset.Tx) error { // want `refset call refset.InTx made with context ctx inside`
			return nil
		})
	})
}

// A named function given to InTx is checked where it is declared.
func namedFunction(ctx context.Context, db refset.Database) error {
	return refset.InTx(ctx, db, saveTwo)
}

func saveTwo(c context.Context, tx refset.Tx) error {
	_, err := set.Add(context.TODO(), item{"a"}) // want `made with context context.TODO\(\) inside the unit of work of refset.InTx`
	return err
}

// So is a method given as a method value.
type saver struct{ db refset.Database }

func (s saver) run(ctx context.Context) error { return refset.InTx(ctx, s.db, s.save) }

func (s saver) save(c context.Context, tx refset.Tx) error {
	_, err := set.Add(context.TODO(), item{"a"}) // want `made with context context.TODO\(\) inside the unit of work of refset.InTx`
	return err
}

// Other packages of refset's module count: blockmanager's Put, the slip issue 34
// found surviving the unit's rollback on PostgreSQL.
func blockmanagerPut(ctx context.Context, m *blockmanager.Manager) error {
	return refset.InTx(ctx, m.Database(), func(c context.Context, tx refset.Tx) error {
		_, err := m.Put(ctx, []blockmanager.Block{}) // want `refset call m.Put made with context ctx inside`
		return err
	})
}

// A Command runs in the unit of the call it is given to, with that unit's context.
func commands(ctx context.Context) error {
	_, err := set.Add(ctx, item{"a"}, refset.CommandFunc[string](func(c context.Context, tx refset.Tx, id string) error {
		_, err := set.Add(ctx, item{id + "-copy"}) // want `made with context ctx inside the unit of work of refset.CommandFunc\[string\]`
		return err
	}), copyCommand{})
	return err
}

type copyCommand struct{}

func (copyCommand) Execute(c context.Context, tx refset.Tx, id string) error {
	_, err := set.Add(context.Background(), item{id + "-copy"}) // want `inside the unit of work of a refset.Command's Execute`
	return err
}

// A call meant to run outside the unit says so.
func meantOutside(ctx context.Context, db refset.Database) error {
	return refset.InTx(ctx, db, func(c context.Context, tx refset.Tx) error {
		//unitctx:outside a test of what such a call does
		_, err := set.Add(ctx, item{"a"})
		return err
	})
}

// Outside any unit, any context will do.
func noUnit(ctx context.Context) error {
	_, err := set.Add(context.Background(), item{"a"})
	return err
}
