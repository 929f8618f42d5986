// Package drivers is the list of the SQLite drivers a program links: store/sqlite
// imports none, so that a program compiles only the one it chooses, as database/sql
// programs do. Importing store/sqlite/mattn (github.com/mattn/go-sqlite3, cgo) or
// store/sqlite/modernc (modernc.org/sqlite, pure Go) registers that driver here, with
// what store/sqlite needs to know of it that database/sql does not tell.
package drivers

import (
	"database/sql"
	"database/sql/driver"
	"slices"
	"sync"
)

// Driver is what store/sqlite needs of one SQLite driver.
type Driver struct {
	// Name is the driver's database/sql name.
	Name string
	// Package is the import path of the refset package that registers it, for
	// messages that say what to import.
	Package string
	// Missing, when not empty, says why the driver cannot run in this build (a
	// cgo driver in a program built with CGO_ENABLED=0): it is registered so that
	// asking for it is refused with that reason, and it is never the default.
	Missing string
	// Rank orders the drivers linked together: the highest that can run is the
	// default.
	Rank int
	// Is reports whether d is the driver's.
	Is func(d driver.Driver) bool
	// ResultCode is the SQLite result code of one of the driver's errors, extended
	// where the driver gives it, and its message; ok is false for any other error.
	ResultCode func(err error) (code int, msg string, ok bool)
	// MaxInsertParams bounds the parameters of a multi-row insert (0: no bound).
	MaxInsertParams int
	// Watch starts watching conn, a connection of the driver's in a transaction,
	// and returns a function that reports whether SQLite has ended that transaction
	// since (an interrupted write, a full disk or an I/O error rolls it back), which
	// database/sql does not ask: group commit's check (engine.Group.Watch).
	Watch func(conn *sql.Conn) (ended func() bool)
}

var (
	mu         sync.RWMutex
	registered []Driver
)

// Register adds d, once, from the init of the package that links it.
func Register(d Driver) {
	mu.Lock()
	defer mu.Unlock()
	if slices.ContainsFunc(registered, func(r Driver) bool { return r.Name == d.Name }) {
		panic("refset/sqlite: driver " + d.Name + " registered twice")
	}
	registered = append(registered, d)
	slices.SortStableFunc(registered, func(a, b Driver) int { return b.Rank - a.Rank })
}

// All are the registered drivers, the default first.
func All() []Driver {
	mu.RLock()
	defer mu.RUnlock()
	return slices.Clone(registered)
}

// first is the first registered driver, the default first, for which ok holds.
// Registration happens in init functions, so the list is read under a read lock and
// not copied: the stores ask on every error they translate.
func first(ok func(Driver) bool) (Driver, bool) {
	mu.RLock()
	defer mu.RUnlock()
	for _, d := range registered {
		if ok(d) {
			return d, true
		}
	}
	return Driver{}, false
}

// Named is the registered driver called name.
func Named(name string) (Driver, bool) {
	return first(func(d Driver) bool { return d.Name == name })
}

// Default is the driver a program that names none gets: the best ranked of those
// that can run.
func Default() (Driver, bool) {
	return first(func(d Driver) bool { return d.Missing == "" })
}

// Of is the registered driver of d.
func Of(d driver.Driver) (Driver, bool) {
	return first(func(r Driver) bool { return r.Is != nil && r.Is(d) })
}

// ResultCode is the SQLite result code of err, an error of any registered driver.
func ResultCode(err error) (code int, msg string, ok bool) {
	first(func(d Driver) bool {
		if d.ResultCode != nil {
			code, msg, ok = d.ResultCode(err)
		}
		return ok
	})
	return code, msg, ok
}
