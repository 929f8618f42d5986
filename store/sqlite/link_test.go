package sqlite

import (
	"github.com/refsetdb/refset/store/sqlite/internal/drivers"
	_ "github.com/refsetdb/refset/store/sqlite/mattn"   // go-sqlite3, where cgo builds it
	_ "github.com/refsetdb/refset/store/sqlite/modernc" // modernc.org/sqlite
)

// The package's tests link both drivers, as a program that wants either would.

// mattnLinked reports whether go-sqlite3 can run in this test binary: with cgo.
func mattnLinked() bool {
	d, ok := drivers.Named(DriverMattn)
	return ok && d.Missing == ""
}
