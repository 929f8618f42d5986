// Package modernc links modernc.org/sqlite, SQLite's C source translated to Go, as a
// driver of store/sqlite: a program that imports it for its side effect,
//
//	import _ "github.com/refsetdb/refset/store/sqlite/modernc"
//
// opens its SQLite databases with it. It needs no C compiler, so a program built
// with CGO_ENABLED=0 or for another OS and architecture uses it as it is. Reads and
// bulk writes take about two to three times the CPU of go-sqlite3
// (store/sqlite/mattn); a commit that waits for its fsync costs the same with either.
// Linked beside store/sqlite/mattn, it is the driver of sqlite.Options.Driver
// DriverModernc, and go-sqlite3 is the default.
package modernc

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"sync/atomic"

	"github.com/refsetdb/refset/store/sqlite/internal/drivers"
	"modernc.org/sqlite" // registers the "sqlite" driver
)

// insertParams is how many parameters a multi-row insert binds on modernc.org/sqlite,
// which looks each parameter up among all of a statement's arguments: binding n of
// them costs n²/2 steps, most of a 1,000-block Put's CPU in statements of 4,000 (500
// rows of 8). Statements of 512 made blockmanager's Put 1.5 times faster
// (BenchmarkPutPaired/sqlite-purego).
const insertParams = 512

func init() {
	drivers.Register(drivers.Driver{
		Name:    "sqlite",
		Package: "github.com/refsetdb/refset/store/sqlite/modernc",
		Rank:    1,
		Is: func(d driver.Driver) bool {
			_, ok := d.(*sqlite.Driver)
			return ok
		},
		ResultCode: func(err error) (int, string, bool) {
			var e *sqlite.Error
			if !errors.As(err, &e) {
				return 0, "", false
			}
			return e.Code(), e.Error(), true
		},
		MaxInsertParams: insertParams,
		Watch:           watch,
	})
}

// watch is the driver's Watch. modernc.org/sqlite has no sqlite3_get_autocommit, but
// calls a rollback hook for every rollback of a whole transaction (never for ROLLBACK
// TO), which is registered anew for each transaction watched (the last registered is
// the one called).
func watch(conn *sql.Conn) (ended func() bool) {
	var rolledBack atomic.Bool
	err := conn.Raw(func(dc any) error {
		if c, ok := dc.(interface {
			RegisterRollbackHook(sqlite.RollbackHookFn)
		}); ok {
			c.RegisterRollbackHook(func() { rolledBack.Store(true) })
		}
		return nil
	})
	if err != nil {
		return func() bool { return true } // the connection is gone, and its transaction with it
	}
	return rolledBack.Load
}
