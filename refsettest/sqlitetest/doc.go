// Package sqlitetest opens a throwaway SQLite database for the tests of programs that
// use refset, beside refsettest's Postgres and assertions.
//
// It is a package of its own because SQLite's driver, github.com/mattn/go-sqlite3,
// is C code built with cgo: refsettest, which a Postgres-only program's tests import
// for [refsettest.Postgres] and the assertions, must build with CGO_ENABLED=0, so
// only a program that uses SQLite imports this package, and with it store/sqlite.
//
// [refsettest.Postgres]: https://pkg.go.dev/github.com/refsetdb/refset/refsettest#Postgres
package sqlitetest
