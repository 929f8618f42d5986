// Package sqlitetest opens a throwaway SQLite database for the tests of programs that
// use refset, beside refsettest's Postgres and assertions.
//
// It is a package of its own so that refsettest, which a Postgres-only program's
// tests import for [refsettest.Postgres] and the assertions, links no SQLite driver:
// store/sqlite links two, github.com/mattn/go-sqlite3 (C code built with cgo) and
// modernc.org/sqlite (SQLite translated to Go, several megabytes of binary). Only a
// program that uses SQLite imports this package, and with it store/sqlite. Open uses
// the store's default driver: go-sqlite3, or modernc.org/sqlite in a test binary
// built with CGO_ENABLED=0.
//
// [refsettest.Postgres]: https://pkg.go.dev/github.com/refsetdb/refset/refsettest#Postgres
package sqlitetest
