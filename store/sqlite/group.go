package sqlite

import (
	"github.com/jmoiron/sqlx"
	"github.com/refsetdb/refset/internal/engine"
	"github.com/refsetdb/refset/store/sqlite/internal/drivers"
)

// groupCommit is how units of work share the writer's transactions (see "Group
// commit" in the package doc), or nil when opts turn it off.
func groupCommit(opts Options, writer *sqlx.DB) *engine.Group {
	if opts.NoGroupCommit {
		return nil
	}
	g := &engine.Group{
		// SQLite rolls back the whole transaction when a write in it is interrupted
		// (sqlite3_interrupt, which both drivers call when a statement's context
		// ends).
		InterruptRollsBack: true,
		MaxAge:             opts.groupMaxAge,
		Evict:              opts.groupEvict,
		Conn:               writer.Connx,
	}
	// SQLite's own answer, which database/sql does not ask for, to whether a group's
	// transaction has ended on its own, each driver's way (store/sqlite/mattn,
	// store/sqlite/modernc).
	if d, ok := drivers.Of(writer.Driver()); ok {
		g.Watch = d.Watch
	}
	return g
}
