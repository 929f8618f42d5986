package sqlite

import (
	"database/sql/driver"
	"fmt"
	"strings"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store/sqlite/internal/drivers"
)

// The SQLite drivers, by the database/sql names Options.Driver takes. The store
// imports neither: a program links the one it uses by importing its package (see
// the package documentation), as database/sql programs choose theirs. Both speak the
// same DSN parameters, open the same files, and fail with the same SQLite result
// codes, which TranslateError maps to the same sentinels: they differ in what
// building and running them costs.
const (
	// DriverMattn is github.com/mattn/go-sqlite3, linked by importing
	// github.com/refsetdb/refset/store/sqlite/mattn: SQLite's C source compiled with
	// cgo. The faster of the two, and the default where both are linked, but it
	// needs a C compiler.
	DriverMattn = "sqlite3"
	// DriverModernc is modernc.org/sqlite, linked by importing
	// github.com/refsetdb/refset/store/sqlite/modernc: SQLite's C source
	// translated to Go. It builds with CGO_ENABLED=0 and cross-compiles like any Go
	// package.
	DriverModernc = "sqlite"
)

// chooseDriver is the driver Open dials with for Options.Driver name. Left empty, it
// is the best of those the program links that can run: go-sqlite3 where cgo built
// it, modernc.org/sqlite otherwise. Both keep refset's promises alike (the
// conformance suites run on each). A driver asked for by name that is not linked, or
// cannot run in this build, is refused, saying what to import or why.
func chooseDriver(name string) (drivers.Driver, error) {
	if name == "" {
		if d, ok := drivers.Default(); ok {
			return d, nil
		}
		return drivers.Driver{}, fmt.Errorf("refset/sqlite: open: %w: %s", refset.ErrInvalidConfig, noDriver())
	}
	d, ok := drivers.Named(name)
	switch {
	case !ok && (name == DriverMattn || name == DriverModernc):
		return d, fmt.Errorf("refset/sqlite: open: %w: driver %q is not linked into this program; import _ %q", refset.ErrInvalidConfig, name, driverPackage(name))
	case !ok:
		return d, fmt.Errorf("refset/sqlite: open: %w: driver %q (want %q or %q)", refset.ErrInvalidConfig, name, DriverMattn, DriverModernc)
	case d.Missing != "":
		alt := ""
		if other, ok := drivers.Default(); ok {
			alt = fmt.Sprintf("; leave Options.Driver empty or set it to %q", other.Name)
		} else {
			alt = fmt.Sprintf("; import _ %q (pure Go) instead", driverPackage(DriverModernc))
		}
		return d, fmt.Errorf("refset/sqlite: open: %w: driver %q: %s%s", refset.ErrInvalidConfig, name, d.Missing, alt)
	}
	return d, nil
}

// driverPackage is the import path of the package that links driver name.
func driverPackage(name string) string {
	if name == DriverMattn {
		return "github.com/refsetdb/refset/store/sqlite/mattn"
	}
	return "github.com/refsetdb/refset/store/sqlite/modernc"
}

// noDriver says what a program that links no SQLite driver should import.
func noDriver() string {
	why := ""
	if ds := drivers.All(); len(ds) > 0 {
		var missing []string
		for _, d := range ds {
			missing = append(missing, d.Missing)
		}
		why = " (" + strings.Join(missing, "; ") + ")"
	}
	return fmt.Sprintf("no SQLite driver this program can run is linked%s: import one for its side effect, "+
		"_ %q (pure Go, no C compiler) or _ %q (cgo, faster)", why, driverPackage(DriverModernc), driverPackage(DriverMattn))
}

// driverOf is the registered driver of a caller's pool: go-sqlite3 or
// modernc.org/sqlite, and no other.
func driverOf(d driver.Driver) (drivers.Driver, error) {
	if r, ok := drivers.Of(d); ok {
		return r, nil
	}
	return drivers.Driver{}, fmt.Errorf("%w: the pool's driver is %T; want github.com/mattn/go-sqlite3 or modernc.org/sqlite, "+
		"linked by importing %s or %s", refset.ErrInvalidConfig, d, driverPackage(DriverMattn), driverPackage(DriverModernc))
}

// resultCode is the SQLite result code of a driver's error, extended where the
// driver gives it, and the message that came with it; ok is false for an error of
// neither driver. The codes are SQLite's own, so both drivers' errors map alike.
func resultCode(err error) (code int, msg string, ok bool) { return drivers.ResultCode(err) }
