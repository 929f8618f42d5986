package units

import (
	"context"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
)

// The unit's parameter reassigned holds what it is assigned: every value must be
// the unit's, also in a loop.
func parameterReassigned(ctx context.Context, db refset.Database) error {
	return refset.InTx(ctx, db, func(c context.Context, tx refset.Tx) error {
		c = ctx
		_, err := set.Add(c, item{"a"}) // want `made with context c inside the unit of work of refset.InTx`
		return err
	})
}

func parameterReassignedInLoop(ctx context.Context, db refset.Database) error {
	return refset.InTx(ctx, db, func(c context.Context, tx refset.Tx) error {
		for i := 0; i < 2; i++ {
			if _, err := set.Add(c, item{"a"}); err != nil { // want `made with context c inside`
				return err
			}
			c = ctx // the second time round, the call above is made with ctx
		}
		return nil
	})
}

func parameterMadeFromItself(ctx context.Context, db refset.Database) error {
	return refset.InTx(ctx, db, func(c context.Context, tx refset.Tx) error {
		var cancel context.CancelFunc
		c, cancel = context.WithTimeout(c, time.Second) // still the unit's
		defer cancel()
		c = context.WithValue(c, item{}, 1)
		_, err := set.Add(c, item{"a"})
		return err
	})
}

// A variable declared without a value and assigned the unit's context in both
// branches of an if is the unit's; one assigned another's in one branch is not.
func assignedInBranches(ctx context.Context, db refset.Database, slow bool) error {
	return refset.InTx(ctx, db, func(c context.Context, tx refset.Tx) error {
		var use context.Context
		if slow {
			use = context.WithValue(c, item{}, 1)
		} else {
			use = c
		}
		if _, err := set.Add(use, item{"a"}); err != nil {
			return err
		}
		var other context.Context
		if slow {
			other = c
		} else {
			other = ctx
		}
		_, err := set.Add(other, item{"b"}) // want `made with context other inside`
		return err
	})
}

// A chain of contexts made from the outer one is not the unit's, whatever the
// steps; WithCancelCause and WithoutCancel of the unit's are.
func derivedChains(ctx context.Context, db refset.Database) error {
	return refset.InTx(ctx, db, func(c context.Context, tx refset.Tx) error {
		c1 := context.WithValue(ctx, item{}, 1)
		c2, cancel := context.WithTimeout(c1, time.Second)
		defer cancel()
		c3, cancel3 := context.WithCancelCause(c2)
		defer cancel3(nil)
		if _, err := set.Add(c3, item{"a"}); err != nil { // want `made with context c3 inside`
			return err
		}
		o1, ocancel := context.WithCancelCause(c)
		defer ocancel(nil)
		if _, err := set.Add(o1, item{"b"}); err != nil {
			return err
		}
		_, err := set.Add(context.WithoutCancel(o1), item{"c"})
		return err
	})
}

// A variable whose address is taken may be written through the pointer: it is
// not followed.
func addressTaken(ctx context.Context, db refset.Database) error {
	return refset.InTx(ctx, db, func(c context.Context, tx refset.Tx) error {
		x := c
		p := &x
		*p = ctx
		_, err := set.Add(x, item{"a"}) // want `made with context x inside`
		return err
	})
}

// A unit's function held in a variable is checked as one written in the call.
func unitInVariable(ctx context.Context, db refset.Database) error {
	work := func(c context.Context, tx refset.Tx) error {
		if _, err := set.Add(c, item{"a"}); err != nil {
			return err
		}
		_, err := set.Add(ctx, item{"b"}) // want `made with context ctx inside the unit of work of refset.InTx`
		return err
	}
	return refset.InTx(ctx, db, work)
}

var unitInPackageVariable = func(c context.Context, tx refset.Tx) error {
	_, err := set.Add(context.Background(), item{"a"}) // want `made with context context.Background\(\) inside the unit of work of refset.InTx`
	return err
}

func packageVariable(ctx context.Context, db refset.Database) error {
	return refset.InTx(ctx, db, unitInPackageVariable)
}

func commandInVariable(ctx context.Context) error {
	fn := func(c context.Context, tx refset.Tx, id string) error {
		_, err := set.Add(ctx, item{id}) // want `made with context ctx inside the unit of work of refset.CommandFunc\[string\]`
		return err
	}
	_, err := set.Add(ctx, item{"a"}, refset.CommandFunc[string](fn))
	return err
}

// So is one converted to a function type of the program's.
type unitFn func(context.Context, refset.Tx) error

func convertedUnit(ctx context.Context, db refset.Database) error {
	return refset.InTx(ctx, db, unitFn(func(c context.Context, tx refset.Tx) error {
		_, err := set.Add(ctx, item{"a"}) // want `made with context ctx inside the unit of work of refset.InTx`
		return err
	}))
}

// And a generic function, or a method of a generic type, instantiated.
func genericUnit[T any](c context.Context, tx refset.Tx) error {
	_, err := set.Add(context.TODO(), item{"a"}) // want `made with context context.TODO\(\) inside the unit of work of refset.InTx`
	return err
}

func genericFunction(ctx context.Context, db refset.Database) error {
	return refset.InTx(ctx, db, genericUnit[int])
}

type genericSaver[T any] struct{}

func (genericSaver[T]) save(c context.Context, tx refset.Tx) error {
	_, err := set.Add(context.TODO(), item{"a"}) // want `made with context context.TODO\(\) inside the unit of work of refset.InTx`
	return err
}

func genericMethod(ctx context.Context, db refset.Database) error {
	return refset.InTx(ctx, db, genericSaver[int]{}.save)
}

// A method of refset called through a variable is a call of refset.
func methodValue(ctx context.Context, db refset.Database) error {
	return refset.InTx(ctx, db, func(c context.Context, tx refset.Tx) error {
		add := set.Add
		if _, err := add(ctx, item{"a"}); err != nil { // want `refset call add made with context ctx inside`
			return err
		}
		if _, err := add(c, item{"b"}); err != nil {
			return err
		}
		addTo := (*refset.RefSet[item, string]).Add
		if _, err := addTo(set, ctx, item{"c"}); err != nil { // want `refset call addTo made with context ctx inside`
			return err
		}
		exec := tx.ExecContext // the unit's Tx: in the unit whatever its context
		_, err := exec(ctx, `DELETE FROM pending`)
		return err
	})
}

// A literal held in a variable that the unit only calls holds what it is called
// with; one given elsewhere too may be called with anything.
func heldLiteral(ctx context.Context, db refset.Database) error {
	return refset.InTx(ctx, db, func(c context.Context, tx refset.Tx) error {
		save := func(x context.Context, key string) error {
			_, err := set.Add(x, item{key}) // want `made with context x inside`
			return err
		}
		if err := save(c, "a"); err != nil {
			return err
		}
		return save(ctx, "b")
	})
}

func heldLiteralOwn(ctx context.Context, db refset.Database) error {
	return refset.InTx(ctx, db, func(c context.Context, tx refset.Tx) error {
		save := func(x context.Context, key string) error {
			_, err := set.Add(x, item{key})
			return err
		}
		if err := save(c, "a"); err != nil {
			return err
		}
		defer save(context.WithoutCancel(c), "b")
		return retry(c, func(attempt context.Context) error { return save(attempt, "c") })
	})
}

func heldLiteralGiven(ctx context.Context, db refset.Database) error {
	return refset.InTx(ctx, db, func(c context.Context, tx refset.Tx) error {
		save := func(x context.Context) error {
			_, err := set.Add(x, item{"a"}) // given to retry: x is whatever retry passes
			return err
		}
		return retry(c, save)
	})
}

// A callback's own context reassigned is not the unit's.
func callbackReassigned(ctx context.Context, db refset.Database) error {
	return refset.InTx(ctx, db, func(c context.Context, tx refset.Tx) error {
		return retry(c, func(attempt context.Context) error {
			attempt = ctx
			_, err := set.Add(attempt, item{"a"}) // want `made with context attempt inside`
			return err
		})
	})
}

// Shadowing: an inner variable of the same name is another variable.
func shadowed(ctx context.Context, db refset.Database) error {
	return refset.InTx(ctx, db, func(c context.Context, tx refset.Tx) error {
		{
			c := ctx
			_, _ = set.Add(c, item{"a"}) // want `made with context c inside`
		}
		_, err := set.Add(c, item{"b"})
		return err
	})
}

// Deferred calls and goroutines are the function's own.
func deferredAndGo(ctx context.Context, db refset.Database) error {
	return refset.InTx(ctx, db, func(c context.Context, tx refset.Tx) error {
		defer set.Add(ctx, item{"a"}) // want `made with context ctx inside`
		go set.Add(ctx, item{"b"})    // want `made with context ctx inside`
		return nil
	})
}

// Generic functions and interfaces of refset's module are refset's.
func genericAndInterface(ctx context.Context, db refset.Database) error {
	return refset.InTx(ctx, db, func(c context.Context, tx refset.Tx) error {
		if _, err := store.NewStore[item, string](ctx, db, store.Config{}); err != nil { // want `refset call store.NewStore\[item, string\] made with context ctx inside`
			return err
		}
		_, err := db.Begin(ctx) // want `refset call db.Begin made with context ctx inside`
		return err
	})
}

// A directive after a call is that call's: the next line's call is reported. A
// call over several lines may have it on its context argument's line.
func directives(ctx context.Context, db refset.Database) error {
	return refset.InTx(ctx, db, func(c context.Context, tx refset.Tx) error {
		_, _ = set.Add(ctx, item{"a"}) //unitctx:outside a test of what such a call does
		_, _ = set.Add(ctx, item{"b"}) // want `made with context ctx inside`
		_, _ = set.Add(ctx, item{"c"}) /* a block comment first */ //unitctx:outside
		_, _ = set.Add(
			ctx, //unitctx:outside
			item{"d"},
		)
		_, _ = set.Add(
			//unitctx:outside
			ctx,
			item{"e"},
		)
		//unitctx:outsider is not the directive
		_, err := set.Add(ctx, item{"f"}) // want `made with context ctx inside`
		return err
	})
}

// A unit nested in the unit, held in a variable, is checked on its own: the
// enclosing function's context is not its own.
func nestedInVariable(ctx context.Context, db refset.Database) error {
	return refset.InTx(ctx, db, func(c context.Context, tx refset.Tx) error {
		inner := func(ic context.Context, tx refset.Tx) error {
			if _, err := set.Add(ic, item{"a"}); err != nil {
				return err
			}
			_, err := set.Add(c, item{"b"}) // want `made with context c inside the unit of work of refset.InTx; use the context refset.InTx passes its function \(parameter ic\)`
			return err
		}
		return refset.InTx(c, db, inner)
	})
}

// A held literal that calls itself passes on what it was called with.
func recursiveLiteral(ctx context.Context, db refset.Database) error {
	return refset.InTx(ctx, db, func(c context.Context, tx refset.Tx) error {
		var f func(x context.Context, n int) error
		f = func(x context.Context, n int) error {
			if n == 0 {
				_, err := set.Add(x, item{"a"})
				return err
			}
			return f(x, n-1)
		}
		return f(c, 3)
	})
}
