//go:build cgo

package mattn

import (
	"database/sql"
	"database/sql/driver"
	"errors"

	"github.com/mattn/go-sqlite3" // registers the "sqlite3" driver
	"github.com/refsetdb/refset/store/sqlite/internal/drivers"
)

func init() {
	drivers.Register(drivers.Driver{
		Name:    "sqlite3",
		Package: "github.com/refsetdb/refset/store/sqlite/mattn",
		Rank:    2,
		Is: func(d driver.Driver) bool {
			_, ok := d.(*sqlite3.SQLiteDriver)
			return ok
		},
		ResultCode: func(err error) (int, string, bool) {
			var se sqlite3.Error
			if !errors.As(err, &se) {
				return 0, "", false
			}
			code := int(se.ExtendedCode)
			if code == 0 {
				code = int(se.Code)
			}
			return code, se.Error(), true
		},
		Watch: watch,
	})
}

// watch is the driver's Watch: go-sqlite3 gives sqlite3_get_autocommit, SQLite's own
// answer to whether a transaction is open.
func watch(conn *sql.Conn) (ended func() bool) {
	return func() bool {
		open := false
		err := conn.Raw(func(dc any) error {
			if c, ok := dc.(*sqlite3.SQLiteConn); ok {
				open = !c.AutoCommit()
			}
			return nil
		})
		return err != nil || !open // a connection gone took its transaction with it
	}
}
