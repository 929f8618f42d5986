//go:build !cgo

package mattn

import "github.com/refsetdb/refset/store/sqlite/internal/drivers"

// Without cgo, go-sqlite3 is a stub that fails on every connection: it is not
// linked, and asking for it says why.
func init() {
	drivers.Register(drivers.Driver{
		Name:    "sqlite3",
		Package: "github.com/refsetdb/refset/store/sqlite/mattn",
		Missing: "github.com/mattn/go-sqlite3 needs cgo, and this program was built with CGO_ENABLED=0",
		Rank:    2,
	})
}
