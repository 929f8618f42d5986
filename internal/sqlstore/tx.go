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
	check func(query string, args []any) error
}

// NewTx marks tx as begun by db, whose cache of the statements of Exec commands
// (nil: none) is stmts. check, if not nil, refuses a statement whose arguments the
// driver would not all bind: go-sqlite3 runs a statement given more arguments than
// it has parameters, and drops the rest (it binds them to the next statement of a
// query that has one), where PostgreSQL refuses it. A row of QueryRowContext, which
// can hold no error of refset's, is not checked.
func NewTx(tx *sqlx.Tx, db refset.Database, stmts *stmtcache.Cache, check func(query string, args []any) error) *Tx {
	return &Tx{Tx: tx, db: db, stmts: stmts, check: check}
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
	if tx.check == nil {
		return nil
	}
	return tx.check(query, args)
}
