package sqlite

import "github.com/refsetdb/refset/internal/engine"

// groupCommit is how units of work share the writer's transactions (see "Group
// commit" in the package doc), or nil when opts turn it off.
func groupCommit(opts Options) *engine.Group {
	if opts.NoGroupCommit {
		return nil
	}
	// SQLite rolls back the whole transaction when a write in it is interrupted
	// (sqlite3_interrupt, which go-sqlite3 calls when a statement's context ends).
	return &engine.Group{InterruptRollsBack: true, MaxAge: opts.groupMaxAge, Evict: opts.groupEvict}
}
