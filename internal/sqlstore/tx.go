package sqlstore

import (
	"context"
	"database/sql"

	"github.com/jmoiron/sqlx"
	"github.com/refsetdb/refset/internal/stmtcache"
	"github.com/refsetdb/refset/refset"
)

// Tx is a write transaction that a store's database began, and that database, so the
// database's stores know that the statements they prepared on its pool can run in it.
// Its methods are the only ways to run a statement in it: the transaction is a field,
// not embedded, so that in a unit of work that shares it (group commit) every
// statement goes through the unit (Member.Enter), which tells a busy unit from an idle
// one and refuses a statement once the unit ended.
type Tx struct {
	tx     *sql.Tx
	db     refset.Database
	stmts  *stmtcache.Cache
	o      TxOptions
	ctx    context.Context // the one the transaction began with
	member Member          // nil: the transaction is one unit's own
}

// Member is one unit of work in a transaction it shares with others (a member of a
// group commit's group, internal/engine): it says whether and how each of the unit's statements may run on
// the shared transaction, and ends the unit its own way, never the transaction.
type Member interface {
	// Enter is called before each statement of the unit: it returns the context to
	// run the statement with and leave, to call once the call returned; or the error
	// the statement fails with, unsent (the unit has ended, or the statement would
	// end the shared transaction or undo another unit's work).
	Enter(ctx context.Context, query string) (stmtCtx context.Context, leave func(), err error)
	Commit() error
	Rollback() error
}

// TxOptions are what a store adds to the transactions its database begins.
type TxOptions struct {
	// Check, if not nil, refuses a statement whose arguments the driver would not
	// all bind: go-sqlite3 runs a statement given more arguments than it has
	// parameters, and drops the rest (it binds them to the next statement of a query
	// that has one), where PostgreSQL refuses it. A row of QueryRowContext, which can
	// hold no error of refset's, is not checked.
	Check func(query string, args []any) error
	// Commit, if not nil, commits tx, in place of tx.Commit: PostgreSQL's asks a
	// server what became of a COMMIT whose connection was lost (see
	// refsetdriver.NotCommitted). ctx is the one the transaction began with.
	Commit func(ctx context.Context, tx *sql.Tx) error
}

// NewTx marks tx, begun with ctx, as begun by db, whose cache of the statements of
// Exec commands (nil: none) is stmts.
func NewTx(ctx context.Context, tx *sqlx.Tx, db refset.Database, stmts *stmtcache.Cache, o TxOptions) *Tx {
	return &Tx{tx: tx.Tx, db: db, stmts: stmts, o: o, ctx: ctx}
}

// NewMemberTx is a unit of work in tx, a transaction db began with ctx that it
// shares with other units (a group's member m): the unit's statements run in tx as m
// allows, and its Commit and Rollback are m's.
func NewMemberTx(ctx context.Context, tx *sqlx.Tx, db refset.Database, stmts *stmtcache.Cache, o TxOptions, m Member) *Tx {
	return &Tx{tx: tx.Tx, db: db, stmts: stmts, o: o, ctx: ctx, member: m}
}

// Commit commits the transaction, the store's way if it has one; a unit's, as the
// unit does.
func (tx *Tx) Commit() error {
	if tx.member != nil {
		return tx.member.Commit()
	}
	if tx.o.Commit == nil {
		return tx.tx.Commit()
	}
	return tx.o.Commit(tx.ctx, tx.tx)
}

// Rollback rolls the transaction back; a unit's, as the unit does.
func (tx *Tx) Rollback() error {
	if tx.member != nil {
		return tx.member.Rollback()
	}
	return tx.tx.Rollback()
}

// ExecCommand runs the statement of a refset.Exec command, through the database's
// statement cache: prepared once it has run twice.
func (tx *Tx) ExecCommand(ctx context.Context, query string, args ...any) (sql.Result, error) {
	ctx, leave, err := tx.enter(ctx, query, true, args)
	if err != nil {
		return nil, err
	}
	defer leave()
	return tx.stmts.Exec(ctx, tx.tx, query, args...)
}

// ExecContext runs query in the transaction, once its arguments are checked.
func (tx *Tx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	ctx, leave, err := tx.enter(ctx, query, true, args)
	if err != nil {
		return nil, err
	}
	defer leave()
	return tx.tx.ExecContext(ctx, query, args...)
}

// QueryContext runs query in the transaction, once its arguments are checked.
func (tx *Tx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	ctx, leave, err := tx.enter(ctx, query, true, args)
	if err != nil {
		return nil, err
	}
	defer leave()
	return tx.tx.QueryContext(ctx, query, args...)
}

// QueryRowContext runs query in the transaction. A unit's statement that may not run
// is not sent: its row's Scan fails with context.Canceled, the one error database/sql
// lets a caller put in a Row.
func (tx *Tx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if tx.member == nil {
		return tx.tx.QueryRowContext(ctx, query, args...)
	}
	stmtCtx, leave, err := tx.member.Enter(ctx, query)
	if err != nil {
		dead, cancel := context.WithCancel(ctx)
		cancel()
		return tx.tx.QueryRowContext(dead, query, args...)
	}
	defer leave()
	return tx.tx.QueryRowContext(stmtCtx, query, args...)
}

// execStmt runs st, a statement prepared on the database's pool, in the transaction,
// as ExecContext runs its query.
func (tx *Tx) execStmt(ctx context.Context, st *sql.Stmt, query string, args ...any) (sql.Result, error) {
	ctx, leave, err := tx.enter(ctx, query, false, nil)
	if err != nil {
		return nil, err
	}
	defer leave()
	return tx.tx.StmtContext(ctx, st).ExecContext(ctx, args...)
}

// Stmt is a statement prepared in a Tx, for a caller that runs one statement many
// times (clean-up deletes a chain a link at a time): it runs as the Tx's own
// statements do, through the unit if the Tx is one. It is closed with the
// transaction, if not before.
type Stmt struct {
	tx    *Tx
	stmt  *sql.Stmt
	query string
}

// PrepareContext prepares query in the transaction.
func (tx *Tx) PrepareContext(ctx context.Context, query string) (*Stmt, error) {
	ctx, leave, err := tx.enter(ctx, query, false, nil)
	if err != nil {
		return nil, err
	}
	defer leave()
	st, err := tx.tx.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return &Stmt{tx: tx, stmt: st, query: query}, nil
}

// ExecContext runs the statement with args, once they are checked.
func (s *Stmt) ExecContext(ctx context.Context, args ...any) (sql.Result, error) {
	ctx, leave, err := s.tx.enter(ctx, s.query, true, args)
	if err != nil {
		return nil, err
	}
	defer leave()
	return s.stmt.ExecContext(ctx, args...)
}

// Close closes the statement.
func (s *Stmt) Close() error { return s.stmt.Close() }

// enter checks a statement's arguments (when check) and, in a unit, enters it
// (Member.Enter).
func (tx *Tx) enter(ctx context.Context, query string, check bool, args []any) (context.Context, func(), error) {
	if check {
		if err := tx.checkArgs(query, args); err != nil {
			return nil, nil, err
		}
	}
	if tx.member == nil {
		return ctx, func() {}, nil
	}
	return tx.member.Enter(ctx, query)
}

func (tx *Tx) checkArgs(query string, args []any) error {
	if tx.o.Check == nil {
		return nil
	}
	return tx.o.Check(query, args)
}
