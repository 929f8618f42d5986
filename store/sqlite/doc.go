// Package sqlite keeps a refset.RefSet in a SQLite database file.
//
// Open sets the database up the way refset needs it: foreign keys enforced on every
// connection (SQLite leaves them off by default, per connection), write-ahead
// logging, and write transactions that take the write lock when they begin (BEGIN
// IMMEDIATE), all on one writer connection, with a separate pool of read-only
// connections. Concurrent writers therefore queue for the writer instead of failing
// with "database is locked", and readers never wait for them. New takes pools the
// caller opened instead, and checks each of these settings, refusing with
// refset.ErrInvalidConfig that names the DSN parameter to add. store.Open opens a
// path or file: URL here when given this package's Options.
//
// store.NewStore maps a struct to an existing table through its `db` tags, checks
// both against the catalog, and creates the set's holds table beside it; it and
// store.NewCollector take a *DB as they take any store's database. Options embeds
// store.Options, the options every store takes (logging, metrics, the statement
// cache, external migrations), beside SQLite's own.
//
// A statement a Command or an InTx function runs in a transaction refset began, given
// another number of arguments than its parameters, is refused with
// refset.ErrStatement, as PostgreSQL refuses it: go-sqlite3 alone would run it with
// too many and drop the rest. (A QueryRowContext row, which cannot hold such an error,
// is not checked; named arguments are left to the driver.)
package sqlite
