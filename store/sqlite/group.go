package sqlite

import (
	"context"
	"strings"
	"sync"

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
		Classify:           classify,
		Apart:              (&deferredKeys{}).apart,
	}
	// SQLite's own answer, which database/sql does not ask for, to whether a group's
	// transaction has ended on its own, each driver's way (store/sqlite/mattn,
	// store/sqlite/modernc).
	if d, ok := drivers.Of(writer.Driver()); ok {
		g.Watch = d.Watch
	}
	return g
}

// deferredKeys is group commit's Apart on SQLite: a group takes no other unit while
// the schema (main or temp) declares a foreign key DEFERRABLE INITIALLY DEFERRED. A
// violation of a deferred key is counted by SQLite and checked only at COMMIT, and
// neither driver tells the count: a later unit could make good the reference an
// earlier one left dangling, and the shared COMMIT would pass, the earlier unit told
// it committed when alone it would have failed. Each unit of such a database runs in
// a transaction of its own. (What defers keys inside a unit, PRAGMA
// defer_foreign_keys, or DDL that declares a deferred key, is classify's
// StatementAlone: the unit runs alone.)
//
// It is asked at most once per group (and again after a unit's DDL), and only when a
// unit waits to join: one query, PRAGMA schema_version, which another connection's
// DDL changes; the schema's SQL is read again only when it changed, or when a unit's
// DDL may have changed it (changed: the temp schema's DDL leaves main's version as
// it was).
type deferredKeys struct {
	mu       sync.Mutex
	known    bool
	version  int64 // main's schema_version
	deferred bool  // the schema of that version has a deferred key
}

func (d *deferredKeys) apart(ctx context.Context, tx *sqlx.Tx, changed bool) (bool, error) {
	var version int64
	if err := tx.QueryRowContext(ctx, `PRAGMA main.schema_version`).Scan(&version); err != nil {
		return true, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.known && d.version == version && !changed {
		return d.deferred, nil
	}
	var sqls []string
	if err := tx.SelectContext(ctx, &sqls, `SELECT sql FROM main.sqlite_master WHERE type = 'table' AND sql LIKE '%deferred%'
		UNION ALL SELECT sql FROM temp.sqlite_master WHERE type = 'table' AND sql LIKE '%deferred%'`); err != nil {
		d.known = false
		return true, err
	}
	d.known, d.version, d.deferred = true, version, false
	for _, q := range sqls {
		if declaresDeferred(q) {
			d.deferred = true
			break
		}
	}
	return d.deferred, nil
}

// declaresDeferred reports whether a table's SQL declares a foreign key DEFERRABLE
// INITIALLY DEFERRED (NOT DEFERRABLE, INITIALLY IMMEDIATE and DEFERRABLE alone are
// checked at once).
func declaresDeferred(table string) bool {
	toks := sqlTokens(table)
	for i := 0; i+2 < len(toks); i++ {
		if strings.EqualFold(toks[i], "deferrable") && strings.EqualFold(toks[i+1], "initially") && strings.EqualFold(toks[i+2], "deferred") &&
			(i == 0 || !strings.EqualFold(toks[i-1], "not")) {
			return true
		}
	}
	return false
}
