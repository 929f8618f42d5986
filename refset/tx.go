package refset

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"time"
)

// maxAttempts bounds how often InTx runs a unit of work that the database aborted
// with a conflict (serialization failure, deadlock, busy SQLite) before giving up.
const maxAttempts = 6

// InTx runs fn in one write transaction of db and commits it: everything fn does
// (Add, Upgrade and Complete through their Tx forms, holds, the caller's own SQL)
// commits together or not at all. If fn returns an error the transaction rolls back
// and InTx returns that error. If the database aborts the transaction to keep
// concurrent ones apart (ErrConflict), fn runs again in a new transaction, a bounded
// number of times with jittered back-off; fn must therefore have no effects outside
// the transaction.
//
// Inside fn, use the Tx forms (AddTx, UpgradeTx, CompleteTx) with tx. The plain forms
// open a transaction of their own, which is not part of the unit of work, and on
// SQLite, whose one writer connection fn's transaction holds, would wait for it
// until ctx ends.
//
// The tx given to fn translates driver errors of ExecContext and QueryContext to the
// refset sentinels; an error from a QueryRowContext row's Scan is translated when fn
// returns it.
func InTx(ctx context.Context, db Database, fn func(tx Tx) error) error {
	if db == nil {
		return opError("in transaction", ErrInvalidTx, errors.New("nil database"))
	}
	return RetryConflicts(ctx, func() error { return inTxOnce(ctx, db, fn) })
}

// RetryConflicts runs fn, and runs it again while it fails with ErrConflict, as InTx
// does with a unit of work: at most six runs in all, with jittered back-off between
// them. It is for work that commits on its own, a single statement outside any
// transaction; fn must leave nothing behind when it fails.
func RetryConflicts(ctx context.Context, fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || !errors.Is(err, ErrConflict) || attempt == maxAttempts {
			return err
		}
		if werr := backoff(ctx, attempt); werr != nil {
			return errors.Join(err, werr)
		}
	}
}

func inTxOnce(ctx context.Context, db Database, fn func(tx Tx) error) (err error) {
	if err := ctx.Err(); err != nil {
		return err
	}
	raw, err := db.Begin(ctx)
	if err != nil {
		return db.TranslateError(err, "BEGIN")
	}
	tx := &translatingTx{tx: raw, db: db}
	defer func() {
		if err != nil {
			_ = raw.Rollback()
		}
	}()
	if err := fn(tx); err != nil {
		return db.TranslateError(err, "")
	}
	if err := raw.Commit(); err != nil {
		return db.TranslateError(err, "COMMIT")
	}
	return nil
}

// inSavepoint runs fn inside the caller's transaction so that, if fn fails, only
// what fn did is undone and the caller's transaction stays usable (Postgres would
// otherwise refuse every later statement of it).
func inSavepoint(ctx context.Context, db Database, tx Tx, fn func(tx Tx) error) error {
	if tx == nil {
		return opError("in transaction", ErrInvalidTx, nil)
	}
	if _, err := tx.ExecContext(ctx, "SAVEPOINT refset"); err != nil {
		return db.TranslateError(err, "SAVEPOINT")
	}
	if err := fn(wrapTx(tx, db)); err != nil {
		// The rollback must run even when ctx is what failed.
		undo := context.WithoutCancel(ctx)
		_, rbErr := tx.ExecContext(undo, "ROLLBACK TO SAVEPOINT refset")
		if rbErr == nil {
			_, rbErr = tx.ExecContext(undo, "RELEASE SAVEPOINT refset")
		}
		return errors.Join(db.TranslateError(err, ""), rbErr)
	}
	if _, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT refset"); err != nil {
		return db.TranslateError(err, "RELEASE")
	}
	return nil
}

func backoff(ctx context.Context, attempt int) error {
	base := time.Millisecond << min(attempt, 7) // 2 ms .. 128 ms
	wait := base/2 + rand.N(base)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// translatingTx is the Tx handed to units of work and commands: the caller's
// transaction, with driver errors translated where the failing statement is known.
type translatingTx struct {
	tx Tx
	db Database
}

func wrapTx(tx Tx, db Database) Tx {
	if t, ok := tx.(*translatingTx); ok {
		return t
	}
	return &translatingTx{tx: tx, db: db}
}

func (t *translatingTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	res, err := t.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return nil, t.db.TranslateError(err, query)
	}
	return res, nil
}

func (t *translatingTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	rows, err := t.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, t.db.TranslateError(err, query)
	}
	return rows, nil
}

func (t *translatingTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return t.tx.QueryRowContext(ctx, query, args...)
}

// Unwrap is the caller's transaction, for a store that runs its statements on it
// directly (prepared, on the transaction's connection) and translates their errors
// itself.
func (t *translatingTx) Unwrap() Tx { return t.tx }

func (t *translatingTx) Commit() error   { return t.tx.Commit() }
func (t *translatingTx) Rollback() error { return t.tx.Rollback() }
