// Package refsetdriver is the contract between refset and its stores: what a store's
// database gives the packages built on it (refset's core, clean-up, the migrations,
// blockmanager, custody) and everything that differs between SQL dialects. Users do
// not need it: they open a database with store/sqlite or store/postgres and pass it
// on as a refset.Database.
//
// API is not stable: it changes with refset's features. DO NOT IMPLEMENT it outside
// this module; a store of your own implements refset.SetStore instead.
//
// # Finding a database's driver
//
// A store's database (refset.Database, which is Database) has one method for it:
// Driver. Of does the same and refuses a database without one. Everything a package
// above the stores asks of a database it asks of that Driver, and nothing above the
// stores compares a dialect's name or switches on a database's Go type.
//
// # Optional interfaces
//
// A Driver may also implement these, found by a type assertion on the Driver, as
// database/sql/driver lists its own:
//
//   - Pipeliner: runs a unit of work made only of statements in fewer round trips
//     (pgx: BEGIN and COMMIT sent with the statements).
//   - RowReader: reads the one row of a lookup by key over the driver's own
//     interface rather than through database/sql (pgx).
//   - Replicated: a hot standby that reads which a lagging copy cannot make wrong go
//     to first (postgres.Options.Replica), through ReadReplicaFirst.
//   - TxLocks: locks, held until the transaction ends, that write transactions run
//     side by side order themselves by (PostgreSQL's advisory locks, FOR KEY SHARE).
//     Without it the database runs one write transaction at a time (SQLite).
//   - BulkWrites: one statement that writes any number of rows, bound as lists, to
//     several tables (PostgreSQL's unnest in a WITH clause).
//   - OwnCommits: runs a statement that commits on its own never twice and, when
//     its connection is lost once it was sent, waits until it can no longer commit
//     and asks the caller's query whether it did (PostgreSQL).
//
// Pipeliner, RowReader and Replicated serve refset's own packages; TxLocks,
// BulkWrites and OwnCommits, with the Driver's fragments (ColumnIn, StringList,
// Expiry, InProcess), serve a component's own statements on its own tables
// (blockmanager's, custody's).
//
// # What else is here
//
// The values the stores and refset's runners pass each other: Observer and
// NoObserver (refset.Observer and refset.NoObserver are aliases), SchemaSQL and
// Registered (package schema's side of a dialect), CleanupDialect with Plan, Batch,
// Clock and Reference (package cleanup's), and Binding and Settings, which tie a
// dialect to one database's pool and the options every store has.
package refsetdriver
