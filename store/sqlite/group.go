package sqlite

import (
	"database/sql"
	"sync/atomic"

	"github.com/jmoiron/sqlx"
	"github.com/refsetdb/refset/internal/engine"
	"modernc.org/sqlite"
)

// groupCommit is how units of work share the writer's transactions (see "Group
// commit" in the package doc), or nil when opts turn it off.
func groupCommit(opts Options, writer *sqlx.DB) *engine.Group {
	if opts.NoGroupCommit {
		return nil
	}
	return &engine.Group{
		// SQLite rolls back the whole transaction when a write in it is interrupted
		// (sqlite3_interrupt, which both drivers call when a statement's context
		// ends).
		InterruptRollsBack: true,
		MaxAge:             opts.groupMaxAge,
		Evict:              opts.groupEvict,
		Conn:               writer.Connx,
		Watch:              watchTransaction,
	}
}

// watchTransaction is engine.Group.Watch on conn, a connection of either driver in a
// transaction: SQLite's own answer, which database/sql does not ask for, to whether
// the transaction has ended since (an interrupted write, a full disk or an I/O error
// rolls it back). go-sqlite3 gives sqlite3_get_autocommit; modernc.org/sqlite does
// not, but calls a rollback hook for every rollback of a whole transaction (never for
// ROLLBACK TO), which is registered anew for each transaction watched.
func watchTransaction(conn *sql.Conn) (ended func() bool) {
	var rolledBack atomic.Bool
	var mattn bool
	err := conn.Raw(func(dc any) error {
		if _, mattn = mattnInTransaction(dc); mattn {
			return nil
		}
		if c, ok := dc.(interface {
			RegisterRollbackHook(sqlite.RollbackHookFn)
		}); ok {
			c.RegisterRollbackHook(func() { rolledBack.Store(true) })
		}
		return nil
	})
	switch {
	case err != nil:
		return func() bool { return true } // the connection is gone, and its transaction with it
	case mattn:
		return func() bool {
			open := false
			err := conn.Raw(func(dc any) error {
				open, _ = mattnInTransaction(dc)
				return nil
			})
			return err != nil || !open
		}
	}
	return rolledBack.Load
}
