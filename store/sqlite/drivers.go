package sqlite

import (
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/refsetdb/refset/refset"
	"modernc.org/sqlite" // registers the "sqlite" driver
)

// Drivers Open can dial with. Both speak the same DSN parameters, open the same
// files, and fail with the same SQLite result codes, which TranslateError maps to
// the same sentinels: they differ in what building and running them costs.
const (
	// DriverMattn is github.com/mattn/go-sqlite3: SQLite's C source compiled with
	// cgo. The faster of the two, and the default, but it needs a C compiler, and
	// a program built with CGO_ENABLED=0 gets a stub of it that fails when used.
	DriverMattn = "sqlite3"
	// DriverModernc is modernc.org/sqlite: SQLite's C source translated to Go. It
	// builds with CGO_ENABLED=0 and cross-compiles like any Go package.
	DriverModernc = "sqlite"
)

// chooseDriver is the driver Open dials with for Options.Driver name. Left empty,
// it is go-sqlite3 where cgo built it and modernc.org/sqlite where it did not: both
// keep refset's promises alike (the conformance suites run on each), so a program
// built with CGO_ENABLED=0 works as it is, where an error would only ask for the
// one driver that build can run. Asked by name for go-sqlite3 in such a build, Open
// refuses, saying why, rather than fail on the stub's first statement.
func chooseDriver(name string) (string, error) {
	switch name {
	case "":
		if mattnLinked {
			return DriverMattn, nil
		}
		return DriverModernc, nil
	case DriverMattn:
		if !mattnLinked {
			return "", fmt.Errorf("refset/sqlite: open: %w: driver %q (github.com/mattn/go-sqlite3) needs cgo, and this program was built with CGO_ENABLED=0; leave Options.Driver empty or set it to %q (modernc.org/sqlite, pure Go)", refset.ErrInvalidConfig, name, DriverModernc)
		}
		return name, nil
	case DriverModernc:
		return name, nil
	}
	return "", fmt.Errorf("refset/sqlite: open: %w: driver %q (want %q or %q)", refset.ErrInvalidConfig, name, DriverMattn, DriverModernc)
}

// driverOf names the driver of a caller's pool: go-sqlite3 or modernc.org/sqlite,
// and no other.
func driverOf(d driver.Driver) (string, error) {
	if _, ok := d.(*sqlite.Driver); ok {
		return DriverModernc, nil
	}
	if isMattn(d) {
		return DriverMattn, nil
	}
	return "", fmt.Errorf("%w: the pool's driver is %T; want github.com/mattn/go-sqlite3 or modernc.org/sqlite", refset.ErrInvalidConfig, d)
}

// resultCode is the SQLite result code of a driver's error, extended where the
// driver gives it, and the message that came with it; ok is false for an error of
// neither driver. The codes are SQLite's own, so both drivers' errors map alike.
func resultCode(err error) (code int, msg string, ok bool) {
	var me *sqlite.Error
	if errors.As(err, &me) {
		return me.Code(), me.Error(), true
	}
	return mattnCode(err)
}
