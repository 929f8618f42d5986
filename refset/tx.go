package refset

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/refsetdb/refset/internal/ctxerr"
	"github.com/refsetdb/refset/internal/stmtcache"
	"github.com/refsetdb/refset/internal/txview"
	"github.com/refsetdb/refset/refsetdriver"
)

// maxAttempts bounds how often InTx runs a unit of work that the database aborted
// with a conflict (serialization failure, deadlock, busy SQLite) before giving up.
const maxAttempts = 6

// InTx runs fn in one write transaction of db and commits it: everything fn does
// (Add, Upgrade, Complete, holds, the caller's own SQL) commits together or not at
// all. If fn returns an error the transaction rolls back and InTx returns that error.
// If fn panics the transaction rolls back, its connection goes back to the pool, and
// the panic goes on with its own value. If the database aborts the transaction to keep
// concurrent ones apart (ErrConflict), fn runs again in a new transaction, a bounded
// number of times with jittered back-off (on SQLite, whose units of work share
// commits, also when another unit in the same commit wrote what the database refused
// at COMMIT, a deferred foreign key: fn then runs again in a transaction of its own);
// it also runs once more, at once, when Postgres refused a statement that was
// prepared before a migration changed the type of a column it returns (the statement
// is then prepared anew). fn must therefore have no effects outside the transaction.
//
// fn gets a context that carries the unit of work, and a Tx. Calls of refset made
// with that context join the unit: Add, AddAll, Upgrade and Complete run in its
// transaction under a savepoint (so a failed one undoes only itself, as their *Tx
// forms do), Get, Load and Upgrade read on it (they see what the unit wrote, and take
// no second connection from the pool), clean-up's reports read on it, and InTx itself
// runs its function under a savepoint, once, leaving retries to the outermost unit.
// What cannot join, because it commits on its own (clean-up's Install, Collect and
// Sweep, store.NewStore), fails at once with ErrInUnitOfWork. So use fn's ctx, not the
// one InTx was given: a call with that one, or any other that carries no unit, is not
// part of the unit. On PostgreSQL it takes a connection of its own from the pool and
// commits apart from the unit, standing if the unit rolls back; but when the pool
// has none free and may open no more, and units of work on fn's goroutine hold all
// of its connections (a pool of one, or as many units nested with such contexts as
// it has connections), none is freed before the call returns: such a call, a read as
// much as a write, fails at once with ErrInUnitOfWork, changing nothing, where it
// would wait until its context ended. A pool busy with other goroutines' work is
// waited for. On SQLite, whose one writer connection the unit holds, a write made
// with it on fn's goroutine fails at once with ErrInUnitOfWork (it would wait for the
// unit until the context ended); one made by a goroutine fn started waits for the
// unit (logging a warning once the wait passes the database's SlowStatement). The analyzer
// of package analysis/unitctx (cmd/refsetvet, for go vet -vettool) reports such calls
// in the source. The unit is fn's goroutine's: its transaction is one connection, so
// a call made with fn's ctx while another runs in the unit fails at once with
// ErrInvalidTx. So does a statement run on the Tx (ExecContext, QueryContext,
// QueryRowContext's Scan, or those of a Tx that a call inside the unit gave a Command
// or a nested InTx, or a read of refset's in the unit) while another of the unit's
// is in flight: from its start until its call returns, and for a query until its
// rows are closed (read to the end, or Close); two sent at once would interleave on
// the one connection, and lib/pq then loses it with the whole unit. The refused
// statement is not sent and changes nothing, and the unit stays usable: fn decides
// what the error means, as with a statement the database refused, and if fn returns
// nil the unit commits what its other statements did. The rule cannot tell
// goroutines apart, so fn's own goroutine too closes a query's rows before its next
// statement, as PostgreSQL's drivers require anyway. refset's own writes in the unit
// (the statements of Add, Complete and a nested InTx's savepoint, but not their
// Commands') do not go through the Tx, and a statement on the Tx is not refused
// while one runs on another goroutine: keep them on fn's goroutine. Nor could it be
// made safe: a statement another goroutine runs while a savepoint of the unit is
// open (a call of refset's in the unit, a nested InTx) is part of that savepoint,
// and undone with it if it rolls back. A call still running in the unit when fn
// returns (one a goroutine fn started made with fn's ctx) has done part of its work:
// InTx then rolls the unit back, that call's work with it, and returns ErrInvalidTx
// (a nested InTx breaks the unit around it, which rolls back too, whatever its
// function does with the error); wait for such calls before fn returns. Once fn has
// returned, a call made with its ctx fails with ErrInvalidTx and changes nothing,
// and once InTx returns, its context carries the unit no more: a goroutine that
// outlives fn and calls with it runs on its own.
//
// The Tx cannot end the transaction: a statement such as COMMIT or ROLLBACK fails with
// ErrInvalidCommand, and InTx then rolls back and returns that error whatever fn
// returned. It writes the database's placeholders for ? (see Tx: a statement written
// once runs on both stores) and translates driver errors of ExecContext and
// QueryContext to the refset sentinels; an error from a QueryRowContext row's Scan is
// translated when fn returns it.
//
// Errors: ErrInvalidTx (a nil db), ErrInvalidCommand (a nil fn, or fn ran a statement
// that would end the transaction), ErrConflict (still aborted after the retries), ErrUnavailable
// (with ErrCommitUnknown when the connection was lost while committing), ErrTimeout,
// ErrClosed, the context's error when ctx ended, and whatever fn returned (translated
// to a sentinel when it is a driver's error).
func InTx(ctx context.Context, db Database, fn func(ctx context.Context, tx Tx) error) error {
	if db == nil {
		return opError("in transaction", ErrInvalidTx, errors.New("nil database"))
	}
	if fn == nil {
		return opError("in transaction", ErrInvalidCommand, errors.New("nil function"))
	}
	if tx, ok := refsetdriver.UnitTx(ctx, db); ok {
		return inSavepoint(ctx, db, tx, fn)
	}
	return runUnit(ctx, capabilitiesOf(db), func(ctx context.Context) error { return inTxOnce(ctx, db, fn) })
}

// Reader is where a read of one's own in db, made with ctx, runs: inside a unit of
// work on db (ctx is the one InTx gave its function, or a Command got), the unit's
// transaction, which sees what the unit wrote and takes no second connection from the
// pool; outside any, db.Reader(). Either way, like the Tx of a unit, it writes the
// database's placeholders for ? and translates the driver errors of ExecContext and
// QueryContext to the sentinels. A QueryRowContext row's Scan returns database/sql's
// own error, which nothing can wrap: outside a unit, db.TranslateError(err, query)
// gives its sentinel (inside one, InTx translates what fn returns).
func Reader(ctx context.Context, db Database) Querier {
	return newView(refsetdriver.ReaderFor(ctx, db), db)
}

// runUnit runs once, one attempt at a unit of work in a transaction of its own, as
// InTx promises, and runs it again within three budgets, each counted afresh for an
// attempt that the others let run again:
//
//   - a statement prepared before a schema change (the attempt's error wraps
//     stmtcache.ErrStale; the statement is prepared anew in the new transaction):
//     once more, at once;
//   - a conflict (ErrConflict): maxAttempts runs in a row, with jittered back-off
//     (retryConflicts' rule);
//   - the database lost (ErrUnavailable, and the unit certainly did not commit): for
//     up to the database's RetryUnavailable from the first such failure
//     (store.Options.RetryUnavailable), waiting 50 ms before the first run again and
//     twice as long before each next one, up to a second. A failover's new primary
//     takes seconds to take writes; the waits keep a program's units from hammering
//     the servers that are left meanwhile.
//
// It logs a commit whose outcome is unknown, and makes its error match the
// context's when ctx ended. once gets ctx, marked by refsetdriver.Alone once an
// attempt failed with an error that refsetdriver.RunsAlone (its shared commit was
// refused for what another unit of work wrote).
func runUnit(ctx context.Context, caps capabilities, once func(ctx context.Context) error) error {
	log := caps.log
	runCtx := ctx
	var (
		staleRan  bool          // this attempt ran again for a stale statement
		conflicts int           // runs in a row the database aborted
		outages   int           // runs that lost the database
		deadline  time.Time     // of running again after the first of them
		wait      time.Duration = 50 * time.Millisecond
	)
	for {
		err := once(runCtx)
		if refsetdriver.RunsAlone(err) {
			runCtx = refsetdriver.Alone(ctx)
		}
		again := false
		switch {
		case errors.Is(err, stmtcache.ErrStale) && ctx.Err() == nil && !staleRan:
			log.LogAttrs(ctx, slog.LevelDebug, "refset: a prepared statement was out of date after a schema change; running the transaction again",
				slog.Any("cause", err))
			staleRan, again = true, true
		case errors.Is(err, ErrConflict):
			conflicts++
			again, err = againAfterConflict(ctx, caps, conflicts, err)
			staleRan = false
		case caps.retryUnavailable > 0 && mayRunAgain(err):
			if outages++; outages == 1 {
				deadline = time.Now().Add(caps.retryUnavailable)
			}
			again, err = againWhenAvailable(ctx, caps, outages, wait, deadline, err)
			wait = min(2*wait, time.Second)
			staleRan, conflicts = false, 0
		}
		if again {
			continue
		}
		if errors.Is(err, ErrCommitUnknown) {
			log.LogAttrs(ctx, slog.LevelError, "refset: connection lost while committing; the transaction may or may not have committed",
				slog.Any("error", err))
		}
		return ctxerr.Wrap(ctx, err)
	}
}

// againWhenAvailable says whether a unit of work whose outages-th run lost the
// database with err runs again, after wait, which must end before deadline: the
// error to return if not.
func againWhenAvailable(ctx context.Context, caps capabilities, outages int, wait time.Duration, deadline time.Time, err error) (bool, error) {
	if time.Now().Add(wait).After(deadline) {
		caps.log.LogAttrs(ctx, slog.LevelWarn, "refset: database still unavailable; giving up on the unit of work",
			slog.Int("attempts", outages), slog.Duration("retried_for", caps.retryUnavailable), slog.Any("error", err))
		return false, err
	}
	caps.log.LogAttrs(ctx, slog.LevelInfo, "refset: database unavailable and the unit of work did not commit; running it again",
		slog.Int("attempt", outages), slog.Duration("wait", wait), slog.Any("cause", err))
	if werr := ctxerr.Sleep(ctx, wait); werr != nil {
		return false, errors.Join(err, werr)
	}
	caps.obs.Retried(ctx, err)
	return true, nil
}

// mayRunAgain reports whether a unit of work that failed with err may run again
// once the database is back: it lost the database (ErrUnavailable), and nothing of
// it committed. A commit whose outcome is unknown may have, and a closed database
// will not come back.
func mayRunAgain(err error) bool {
	return errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrCommitUnknown) && !errors.Is(err, ErrClosed)
}

// RetryConflicts runs fn, and runs it again while it fails with ErrConflict, as InTx
// does with a unit of work: at most six runs in all, with jittered back-off between
// them. It is for work that commits on its own, a single statement outside any
// transaction; fn must leave nothing behind when it fails. It returns fn's last
// error, joined with the context's error if ctx ended during a back-off.
//
// db is the database fn works on: each retry, and a conflict that outlasts them, is
// logged to its logger and told to its Observer (Retried, Conflicted), as for InTx,
// so metrics count this work's conflicts beside the units of work's. A nil db tells
// nobody. A nil fn fails with ErrInvalidCommand.
func RetryConflicts(ctx context.Context, db Database, fn func() error) error {
	if fn == nil {
		return opError("retry conflicts", ErrInvalidCommand, errors.New("nil function"))
	}
	return retryConflicts(ctx, capabilitiesOf(db), fn) // a nil db tells nobody
}

// retryConflicts is RetryConflicts, logging each retry (at debug level, with its
// cause) and a conflict that outlasted them (a warning) to caps' logger, and telling
// its Observer.
func retryConflicts(ctx context.Context, caps capabilities, fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || !errors.Is(err, ErrConflict) {
			return err
		}
		if again, err := againAfterConflict(ctx, caps, attempt, err); !again {
			return err
		}
	}
}

// againAfterConflict says whether work whose attempt-th run in a row the database
// aborted with err (ErrConflict) runs again, after a jittered back-off: the error to
// return if not. It logs each retry (at debug level, with its cause) and a conflict
// that outlasted them (a warning) to caps' logger, and tells its Observer.
func againAfterConflict(ctx context.Context, caps capabilities, attempt int, err error) (bool, error) {
	if attempt == maxAttempts {
		caps.log.LogAttrs(ctx, slog.LevelWarn, "refset: transaction still aborted by the database after retries",
			slog.Int("attempts", attempt), slog.Any("error", err))
		caps.obs.Conflicted(ctx, err)
		return false, err
	}
	caps.log.LogAttrs(ctx, slog.LevelDebug, "refset: transaction aborted by the database; retrying",
		slog.Int("attempt", attempt), slog.Any("cause", err))
	if werr := backoff(ctx, attempt); werr != nil {
		return false, errors.Join(err, werr)
	}
	caps.obs.Retried(ctx, err)
	return true, nil
}

func inTxOnce(ctx context.Context, db Database, fn func(ctx context.Context, tx Tx) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("refset: in transaction: %w", err)
	}
	raw, err := db.Begin(ctx)
	if err != nil {
		return db.TranslateError(err, "BEGIN")
	}
	ended := false
	defer func() {
		// Every way out that does not commit rolls back: an error, and a panic in
		// fn, which goes on unwinding after this.
		if !ended {
			_ = raw.Rollback()
		}
	}()
	view := newView(raw, db)
	unitCtx, endUnit := refsetdriver.WithUnit(ctx, db, view)
	unitCtx, undo := withUndo(unitCtx, view)
	committed, mayHaveCommitted := false, false
	defer func() {
		// A unit that did not commit (an error, a panic, a failed commit, a conflict
		// that runs fn again) undoes what its calls did in memory: the hand-overs it
		// completed are usable again. One whose COMMIT may have committed
		// (ErrCommitUnknown) keeps them spent: a hand-over that may have happened is
		// not offered twice.
		undo.end(committed || mayHaveCommitted, nil)
		endUnit(committed)
	}()
	// fn runs in frames a store finds on this goroutine's stack: a call fn makes with
	// a context that carries no unit is refused rather than left to wait for the
	// writer this unit holds (refsetdriver.OutsideItsUnit), or for a connection of a
	// pool whose every connection units on this goroutine hold
	// (refsetdriver.UnitsOnStack).
	err = refsetdriver.RunUnitFuncOf(db, func() error { return fn(unitCtx, view) })
	err = cmp.Or(err, closeUnit(unitCtx, db, view, false))
	if err := refusedOr(view, err); err != nil {
		return db.TranslateError(err, "")
	}
	if err := ctx.Err(); err != nil {
		// The caller gave up while fn ran, and fn did not say so: the unit rolls back,
		// on every database alike. (A transaction's COMMIT is not always sent with the
		// caller's context: a group commit's shared one is not, and a driver may run a
		// statement whose context has already ended.)
		return fmt.Errorf("refset: in transaction: %w", err)
	}
	ended = true // whether it succeeds or not, Commit ends the transaction
	if err := raw.Commit(); err != nil {
		err = commitError(db, err)
		mayHaveCommitted = errors.Is(err, ErrCommitUnknown)
		return err
	}
	committed = true
	return nil
}

// closeUnit closes the unit of work on db that ctx carries (the context a unit gave
// its function, which has returned; view is the unit's Tx) to calls, before it
// commits or releases its savepoint: a call made with ctx after this fails with
// ErrInvalidTx, changing nothing, until the unit has ended and ctx carries it no
// more. A call that a goroutine the function started still runs in the unit has done
// part of its work, under a savepoint of its own that the unit's savepoint statements
// cannot tell from the unit's (refset gives all one name): the unit must not keep
// any of it, and fails with ErrInvalidTx. A savepoint of an enclosing unit (nested)
// breaks the whole transaction too, so that the unit that began it rolls back
// whatever its function does with the error; a transaction of the unit's own rolls
// back at once, which also refuses every later statement of the call's.
func closeUnit(ctx context.Context, db Database, view *txview.View, nested bool) error {
	// Entered and never left: the unit ends.
	if _, _, err := refsetdriver.EnterUnit(ctx, db, "end of the unit of work"); err == nil {
		return nil
	}
	err := opError("in transaction", ErrInvalidTx, errors.New("the function returned while a call made with its context (on a goroutine it started) still ran in the unit of work: the unit rolls back; wait for such calls before returning"))
	if nested {
		view.Break(err)
	}
	return err
}

// commitError is the error of a COMMIT that failed with err: translated, and, when
// the connection was lost, one whose outcome is unknown, unless the database learned
// from a server that it did not commit (refsetdriver.NotCommitted) or said unknown
// itself, with its reason.
func commitError(db Database, err error) error {
	err = db.TranslateError(err, "COMMIT")
	if errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrCommitUnknown) && !refsetdriver.DidNotCommit(err) {
		err = opError("commit", ErrCommitUnknown, err)
	}
	return err
}

// newView is the Tx that Commands and units of work get of raw: statements only,
// driver errors translated, transaction-ending statements refused.
func newView(raw Querier, db Database) *txview.View {
	return txview.New(raw, viewOptions(db))
}

// viewOptions are the txview.Options of db's Views.
func viewOptions(db Database) txview.Options {
	translate := func(err error, query string) error { return translateStatement(db, err, query) }
	caps := capabilitiesOf(db)
	return txview.Options{
		Translate: translate,
		Refuse:    func(err error) error { return opError("statement", ErrInvalidCommand, err) },
		Overlap:   func(err error) error { return opError("statement", ErrInvalidTx, err) },
		Rebind:    caps.rebind,
		Log:       caps.log,
		Slow:      caps.slow,
	}
}

// translateStatement is the error of a statement that failed with err. An error
// here is the database's or the driver's answer to a statement, never a caller's own:
// one that no store sentinel names (lib/pq's count of arguments, say) is still a
// refused statement.
func translateStatement(db Database, err error, query string) error {
	err = db.TranslateError(err, query)
	if IsSentinel(err) || isContextError(err) {
		return err
	}
	return opError("", ErrStatement, err)
}

// refusedOr is the error a unit of work ends with: the statement view refused, if
// any, whatever the work did with that refusal; otherwise err.
func refusedOr(view *txview.View, err error) error {
	refused := view.Refused()
	if refused == nil || errors.Is(err, txview.ErrEndsTransaction) {
		return err
	}
	if err == nil || err == refused { // the unit's own breaking (closeUnit)
		return refused
	}
	return errors.Join(refused, err)
}

// savepoint is the name refset gives the savepoint of a *Tx call (and of a call, or a
// nested InTx, that joins a unit of work). The Tx that Commands and InTx functions get
// runs savepoint statements of their own, so the name is one they cannot know: a
// Command that ran ROLLBACK TO (or RELEASE) a savepoint named as refset's would undo
// the Add it is part of and let it return a token for an object not stored, or leave
// a failed call's writes in the unit. Chosen once per process, the statements'
// text stays the same from call to call.
var savepoint = fmt.Sprintf("refset_savepoint_%016x", rand.Uint64())

// inSavepoint runs fn inside the caller's transaction so that, if fn fails or
// panics, only what fn did is undone and the caller's transaction stays usable
// (Postgres would otherwise refuse every later statement of it). fn's context
// carries tx as the unit of work, for the calls fn makes to join.
func inSavepoint(ctx context.Context, db Database, tx Tx, fn func(ctx context.Context, tx Tx) error) error {
	if err := checkTx(tx); err != nil {
		return err
	}
	// A savepoint of the unit of work ctx carries, if any: one call at a time. What
	// fn's calls leave for after the commit (AfterCommit) waits for that unit's
	// commit; refset sees no commit of a caller's own transaction.
	leave, joined, err := refsetdriver.EnterUnit(ctx, db, "savepoint")
	if err != nil {
		return err
	}
	defer leave()
	// refset's own statements go to the transaction itself, not through a view.
	raw := txview.Raw(tx)
	if _, err := raw.ExecContext(ctx, "SAVEPOINT "+savepoint); err != nil {
		return ctxerr.Wrap(ctx, db.TranslateError(err, "SAVEPOINT"))
	}
	released := false
	undo := func() error {
		// The rollback must run even when ctx is what failed.
		undoCtx := context.WithoutCancel(ctx)
		_, err := raw.ExecContext(undoCtx, "ROLLBACK TO SAVEPOINT "+savepoint)
		if err == nil {
			_, err = raw.ExecContext(undoCtx, "RELEASE SAVEPOINT "+savepoint)
		}
		released = true
		return err
	}
	defer func() {
		if !released { // fn panicked
			_ = undo()
		}
	}()
	// What fn's calls undo in memory if the savepoint rolls back, or, once it is
	// released, if the unit of work around it does (none when tx is the caller's own
	// transaction, whose end refset does not see).
	outer := undoScopeOf(ctx, tx)
	view := newView(tx, db)
	unitCtx, endUnit := refsetdriver.WithUnit(ctx, db, view)
	unitCtx, undone := withUndo(unitCtx, view)
	kept := false
	defer func() {
		undone.end(kept, outer)
		endUnit(kept && joined)
	}()
	err = fn(unitCtx, view)
	err = cmp.Or(err, closeUnit(unitCtx, db, view, true))
	if err := refusedOr(view, err); err != nil {
		return ctxerr.Wrap(ctx, errors.Join(db.TranslateError(err, ""), undo()))
	}
	released = true
	if _, err := raw.ExecContext(ctx, "RELEASE SAVEPOINT "+savepoint); err != nil {
		// The savepoint is still open: on PostgreSQL a statement of fn's that failed,
		// its error swallowed (by a Command that returned nil), aborted it, and the
		// RELEASE is refused. Roll back to it, as for any failure of fn, so that only
		// what fn did is undone and tx stays usable.
		return ctxerr.Wrap(ctx, errors.Join(db.TranslateError(err, "RELEASE"), undo()))
	}
	kept = true
	return nil
}

// checkTx refuses what is not a transaction where one is required: nil, and a
// connection pool or connection (anything that can begin a transaction), on which a
// savepoint would land on whatever connection the pool picks.
func checkTx(tx Tx) error {
	switch tx.(type) {
	case nil:
		return opError("in transaction", ErrInvalidTx, errors.New("nil transaction"))
	case interface {
		BeginTx(context.Context, *sql.TxOptions) (*sql.Tx, error)
	}:
		return opError("in transaction", ErrInvalidTx, fmt.Errorf("%T is a connection pool, not a transaction: pass the *sql.Tx you began on it", tx))
	}
	return nil
}

func backoff(ctx context.Context, attempt int) error {
	base := time.Millisecond << min(attempt, 7) // 2 ms .. 128 ms
	return ctxerr.Sleep(ctx, base/2+rand.N(base))
}
