package sqlstore

import (
	"context"
	"database/sql"

	"github.com/jmoiron/sqlx"
	"github.com/refsetdb/refset/internal/stmtcache"
	"github.com/refsetdb/refset/refset"
)

// Tx is a write transaction that a store's database began: the *sqlx.Tx (its methods
// are Tx's), and that database, so the database's stores know that the statements
// they prepared on its pool can run in it.
type Tx struct {
	*sqlx.Tx
	db    refset.Database
	stmts *stmtcache.Cache
	o     TxOptions
	ctx   context.Context // the one the transaction began with
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
	return &Tx{Tx: tx, db: db, stmts: stmts, o: o, ctx: ctx}
}

// Commit commits the transaction, the store's way if it has one.
func (tx *Tx) Commit() error {
	if tx.o.Commit == nil {
		return tx.Tx.Commit()
	}
	return tx.o.Commit(tx.ctx, tx.Tx.Tx)
}

// ExecCommand runs the statement of a refset.Exec command, through the database's
// statement cache: prepared once it has run twice.
func (tx *Tx) ExecCommand(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if err := tx.checkArgs(query, args); err != nil {
		return nil, err
	}
	return tx.stmts.Exec(ctx, tx.Tx.Tx, query, args...)
}

// ExecContext runs query in the transaction, once its arguments are checked.
func (tx *Tx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if err := tx.checkArgs(query, args); err != nil {
		return nil, err
	}
	return tx.Tx.ExecContext(ctx, query, args...)
}

// QueryContext runs query in the transaction, once its arguments are checked.
func (tx *Tx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if err := tx.checkArgs(query, args); err != nil {
		return nil, err
	}
	return tx.Tx.QueryContext(ctx, query, args...)
}

func (tx *Tx) checkArgs(query string, args []any) error {
	if tx.o.Check == nil {
		return nil
	}
	return tx.o.Check(query, args)
}
