// Package unitctx defines an Analyzer that reports a call of refset made inside a
// unit of work with a context other than the unit's own.
//
// # Analyzer unitctx
//
// unitctx: check that calls inside a unit of work use the unit's context
//
// refset.InTx gives its function a context that carries the unit of work: a call of
// refset made with that context joins the unit. A call made with any other context,
// most often the one InTx itself was given (an easy slip when the function's
// parameter is named otherwise, or is _), runs outside the unit: on SQLite it needs
// the one writer the unit holds (made on the unit's goroutine, it fails with
// refset.ErrInUnitOfWork; made on another, it waits until the unit ends); on
// PostgreSQL it commits apart from the unit, so its work stands when the unit rolls
// back. The analyzer finds such calls on every database, before they run.
//
// The analyzer finds the functions refset runs in a unit of work:
//
//   - a function passed to a function of refset's module for a parameter of function
//     type that takes a context.Context first and a refset.Tx (refset.InTx's fn);
//   - a function converted to a function type of refset's module of that shape
//     (refset.CommandFunc);
//   - a method Execute(ctx context.Context, tx refset.Tx, id ID) (a refset.Command).
//
// The function may be written in the call, named (a function or method, generic
// ones instantiated too), held in a variable of the package (work :=
// func(ctx context.Context, tx refset.Tx) error {...}; refset.InTx(ctx, db, work)),
// or converted to a function type of the program's. A function literal is checked
// where it is written; a named function or method only when the package that
// declares it is the one that passes it (a function of another package given to
// InTx is not checked).
//
// Inside such a function, every call of a function or method of a package of
// refset's module (refset, store/..., blockmanager, cleanup, schema,
// examples/custody/tokens, ...) whose first parameter is a context.Context, called
// by its name or through a variable of the package every value of which is that
// function (add := set.Add), must pass the function's own context, or a context
// made from it: its context parameter, as long as every value assigned to the
// parameter later is made from it too; a variable declared in the function every
// value of which (given by =, := or var, in any branch or loop; var v
// context.Context gives none) is the unit's context or made from it; or a call
// whose first argument is one (context.WithTimeout(ctx, d), context.WithoutCancel(ctx),
// a tracer's Start(ctx, name)). A variable assigned in a way not followed (a range,
// or through a pointer: one whose address is taken), a variable declared outside
// the function and a struct's field hold no context of the unit's. A function
// whose context parameter is _ or unnamed has no context of its own to pass, so
// every such call in it is reported. Calls told where their statements run
// are left alone, whatever their context: a method of a transaction or a pool (the
// unit's Tx's ExecContext) and a call given one (AddTx, a Command's Execute). So are
// functions declared in test files (a test's helpers).
//
// Calls in function literals inside the unit's function count as its own, and that
// includes a goroutine it starts: a goroutine calling with another context either is
// waited for by the function (on SQLite it then waits for the unit's writer, which
// the function's return would free) or outlives it, and then its work commits apart
// from the unit, also when the unit rolls back. Work meant to run apart from the unit
// belongs after InTx returns. A function literal inside that has a context parameter
// of its own may use that one when it is called elsewhere (a retry helper's
// callback): what it is given is not known here. One called where it is written
// (go func(ctx context.Context) {...}(ctx)), or held in a variable that the
// function only calls (save := func(ctx context.Context, key string) error {...};
// save(ctx, "a")), holds what it is called with. The analyzer does not follow calls
// into other functions: a helper declared elsewhere is checked only if it is itself
// a unit's function.
//
// InTx called inside a unit's function runs its own function in a unit of its own
// (a savepoint of the enclosing one), which is checked on its own: it must use its
// own context, not the enclosing function's, whose unit is busy with the savepoint
// while it runs (a call made with that context then fails with refset.ErrInvalidTx).
//
// A call meant to run outside the unit (a test of what such a call does) says so
// with a comment that begins with //unitctx:outside (then a space, or nothing):
// after the call, on the line the call begins on or on the line of its context
// argument, or alone on the line above one of those. A directive after code covers
// that line only, not the next.
//
// Run it with go vet:
//
//	go build -o refsetvet github.com/refsetdb/refset/cmd/refsetvet
//	go vet -vettool=$(pwd)/refsetvet ./...
package unitctx
