//go:build cgo

package sqlite

import (
	"database/sql/driver"
	"errors"

	"github.com/mattn/go-sqlite3" // registers the "sqlite3" driver
)

// go-sqlite3 is linked only where cgo builds it: without cgo its package is a stub
// whose every connection fails, and it lacks the types read here.
const mattnLinked = true

func isMattn(d driver.Driver) bool {
	_, ok := d.(*sqlite3.SQLiteDriver)
	return ok
}

// mattnCode is resultCode of a go-sqlite3 error.
func mattnCode(err error) (code int, msg string, ok bool) {
	var se sqlite3.Error
	if !errors.As(err, &se) {
		return 0, "", false
	}
	code = int(se.ExtendedCode)
	if code == 0 {
		code = int(se.Code)
	}
	return code, se.Error(), true
}

// mattnInTransaction reports whether dc, a driver connection, is go-sqlite3's (ok),
// and if so whether it is in a transaction (sqlite3_get_autocommit).
func mattnInTransaction(dc any) (open, ok bool) {
	c, ok := dc.(*sqlite3.SQLiteConn)
	if !ok {
		return false, false
	}
	return !c.AutoCommit(), true
}
