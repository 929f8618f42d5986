//go:build cgo

package mattn

import (
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
	})
}
