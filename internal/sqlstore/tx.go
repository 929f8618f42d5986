package sqlstore

import (
	"github.com/jmoiron/sqlx"
	"github.com/refsetdb/refset/refset"
)

// Tx is a write transaction that a store's database began: the *sqlx.Tx (its methods
// are Tx's), and that database, so the database's stores know that the statements
// they prepared on its pool can run in it.
type Tx struct {
	*sqlx.Tx
	db refset.Database
}

// NewTx marks tx as begun by db.
func NewTx(tx *sqlx.Tx, db refset.Database) *Tx { return &Tx{Tx: tx, db: db} }
