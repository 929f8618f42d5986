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
// path or file: URL here when given this package's Options. Options.ReadOnly opens a
// file as it is, and changes nothing of it: for a report on a program's database.
//
// store.NewStore maps a struct to an existing table through its `db` tags, checks
// both against the catalog (the ID type against the key column's affinity: a string
// type for TEXT, an integer type for INTEGER), and creates the set's holds table
// beside it, its object_id declared as the key is. Declare a string key TEXT. A key of
// NUMERIC affinity (declared UUID, NUMERIC, DECIMAL, BOOLEAN, ...) takes a string ID
// type too, but SQLite stores a string that reads as a number ("0012", "+12", " 12",
// "1e5", "12.0", 20 digits) in it as that number, which reads back as another string,
// and two IDs could become one: every call that sends such an ID to the table (Add,
// AddAll, Upgrade, Get, Load, a hold) refuses it with refset.ErrInvalidID, before it
// writes anything. The one such string taken is a 64-bit integer as strconv writes it
// ("12", "-7"), which reads back the same, but on a key declared BOOLEAN, which
// go-sqlite3 reads as a bool. A key declared DATE, DATETIME or TIMESTAMP, which both
// drivers read as a time, takes no string ID type (refset.ErrSchema). store.NewStore
// and store.NewCollector take a *DB as they take any store's database. Options embeds
// store.Options, the options every store takes (logging, metrics, the statement
// cache, external migrations), beside SQLite's own.
//
// # Drivers
//
// The store links no SQLite driver of its own: a program links the one it uses, as
// database/sql programs choose theirs, by importing its package for its side effect:
//
//		import _ "github.com/refsetdb/refset/store/sqlite/modernc" // pure Go
//		import _ "github.com/refsetdb/refset/store/sqlite/mattn"   // cgo, faster
//
//	  - store/sqlite/modernc, modernc.org/sqlite (DriverModernc): SQLite's C code
//	    translated to Go. It needs no C compiler, builds with CGO_ENABLED=0 and
//	    cross-compiles; its statements cost more CPU (BENCHMARKS.md).
//	  - store/sqlite/mattn, github.com/mattn/go-sqlite3 (DriverMattn): SQLite's C code
//	    built with cgo. It needs a C compiler, and is the faster at run time.
//
// A program that links neither gets refset.ErrInvalidConfig from Open, saying what to
// import. Options.Driver names one of those linked; left empty it is go-sqlite3 where
// it is linked and cgo built it, modernc.org/sqlite otherwise. Asking for a driver
// that is not linked, or for go-sqlite3 in a program built with CGO_ENABLED=0, is
// refused with refset.ErrInvalidConfig, saying why. Both drivers open the same files with the same settings,
// and their errors carry SQLite's own result codes, which TranslateError maps to the
// same sentinels; refset's suites run on each. What differs is the caller's own SQL:
// modernc.org/sqlite binds a named parameter (:name, @name, $name) only from
// sql.Named, where go-sqlite3 also takes a positional argument for it.
//
// A statement a Command or an InTx function runs in a transaction refset began, given
// another number of arguments than its parameters, is refused with
// refset.ErrStatement, as PostgreSQL refuses it: go-sqlite3 alone would run it with
// too many and drop the rest, and modernc.org/sqlite a query of several statements
// with too few. (A QueryRowContext row, which cannot hold such an error, is not
// checked; named arguments are left to the driver.)
//
// # Group commit
//
// Units of work that wait for the writer together (Add, Upgrade with commands,
// Complete, InTx, blockmanager's Put, ... from several goroutines) share one
// transaction and one commit, so one fsync: each runs in a savepoint of its own, a
// failing unit (an error, a Command's refusal, a panic, its context ending) is rolled
// back alone, and none is told it committed before the shared COMMIT returned. A unit
// alone is not delayed. It is on by default; Options.NoGroupCommit gives each unit a
// transaction and an fsync of its own. How it works, and what each failure returns:
// internal/engine's package doc. What SQLite adds:
//
//   - A unit's own SQL must not end the transaction nor touch the savepoint named
//     refset_group_unit: such statements fail with refset.ErrInvalidCommand, unsent
//     (SAVEPOINT, RELEASE and ROLLBACK TO of names of its own are fine).
//   - Once other units' work is in the transaction, a unit's statement that may
//     write runs to its end whatever its context (SQLite's interrupt would roll back
//     the whole transaction); the context ends the unit between statements. A read
//     runs with its context, since an interrupted read fails alone: one statement
//     that is a SELECT or VALUES (after a WITH prefix or not) or a PRAGMA that reads
//     the schema or checks it (table_info, foreign_key_check, integrity_check, ...).
//     Anything else counts as a write: WITH ... INSERT/UPDATE/DELETE, RETURNING,
//     several statements in one query.
//   - A unit that sends no statement for 250 ms while units before it in its group
//     wait for their commit is rolled back with refset.ErrConflict, and InTx runs it
//     again; one busy with statements is never evicted, nor one whose query SQLite
//     is still stepping as its rows are read.
//   - Deferred foreign keys are checked only at COMMIT, and SQLite tells neither
//     driver which unit left a violation: in a shared transaction, a later unit
//     could make good the reference an earlier one left dangling, and the earlier
//     one would be told it committed when alone it would have failed. So a unit
//     that may leave a deferred violation never shares a transaction:
//     while the schema (main or temp) declares any foreign key DEFERRABLE INITIALLY
//     DEFERRED, every unit runs in a transaction of its own (group commit is in
//     effect off, each unit paying its own COMMIT and fsync: declare keys checked at
//     once to share commits). The schema is read again only when its
//     schema_version changed, asked once per group, when a unit waits to join it.
//     A unit's PRAGMA defer_foreign_keys (set) or DDL that declares a deferred key
//     runs only in a transaction of the unit's own: the group takes no unit after
//     it, and a unit that joined a group holding others' work is rolled back before
//     the statement is sent, with refset.ErrConflict marked to run alone, which
//     refset.InTx runs again in a transaction of its own (a unit begun with Begin
//     gets the ErrConflict and must run again itself). Other DDL in a unit makes
//     the group read the schema again before it takes another unit. A violation
//     left so fails its own unit, with ErrConstraint, at its own COMMIT. Should a
//     shared COMMIT still be refused for what one unit wrote, each unit of the group
//     runs again alone (refset.InTx's retries), so that only that unit fails.
//     refset's own tables have no deferred keys; immediate foreign keys fail their
//     unit alone at once.
//   - What a unit's SQL would change of the writer's connection for every unit after
//     it, in its group and later, and keep through the unit's rollback, is refused
//     with refset.ErrInvalidCommand, unsent, with group commit and without: a PRAGMA
//     that sets the connection (query_only, busy_timeout, locking_mode,
//     ignore_check_constraints, foreign_keys, journal_mode, ...; reading one is fine),
//     a temporary view or trigger, and a temporary table named as (or renamed to) a
//     table or view of the main schema, which would take later units' rows on that
//     connection alone, never to reach the file. Temporary tables of other names are
//     fine. (PRAGMA defer_foreign_keys, which ends with the transaction, and DDL:
//     see deferred foreign keys above.)
package sqlite
