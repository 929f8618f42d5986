// Package sqlitetest opens a throwaway SQLite database for the tests of programs that
// use refset, beside refsettest's Postgres and assertions.
//
// It is a package of its own so that refsettest, which a Postgres-only program's
// tests import for [refsettest.Postgres] and the assertions, does not import
// store/sqlite. It links no SQLite driver itself: the test binary uses the one the
// program links (store/sqlite/modernc or store/sqlite/mattn, imported by the program
// or by its test files), and Open fails the test, saying what to import, when there
// is none.
//
// [refsettest.Postgres]: https://pkg.go.dev/github.com/refsetdb/refset/refsettest#Postgres
package sqlitetest
