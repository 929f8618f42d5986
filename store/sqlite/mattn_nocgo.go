//go:build !cgo

package sqlite

import "database/sql/driver"

// Without cgo, go-sqlite3 is a stub that fails on every connection: it is left
// out, and Options.Driver's default is modernc.org/sqlite (chooseDriver).
const mattnLinked = false

func isMattn(driver.Driver) bool { return false }

func mattnCode(error) (int, string, bool) { return 0, "", false }

func mattnInTransaction(any) (open, ok bool) { return false, false }
