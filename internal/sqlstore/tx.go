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
}

// NewTx marks tx as begun by db, whose cache of the statements of Exec commands
// (nil: none) is stmts.
func NewTx(tx *sqlx.Tx, db refset.Database, stmts *stmtcache.Cache) *Tx {
	return &Tx{Tx: tx, db: db, stmts: stmts}
}

// ExecCommand runs the statement of a refset.Exec command, through the database's
// statement cache: prepared once it has run twice.
func (tx *Tx) ExecCommand(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return tx.stmts.Exec(ctx, tx.Tx.Tx, query, args...)
}
