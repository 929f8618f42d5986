// Package schema runs refset's own migrations, versioned. The SQL itself belongs to
// each store: store/sqlite and store/postgres embed their dialect's files (in
// sql/schema/ of their folder) and give them to this package as a schema.SQL
// (refsetdriver.SchemaSQL; a database's is db.Driver().SchemaSQL()), with every statement on
// refset's own tables (the record of versions, the registry of sets, written once for
// both in store/internal/refsettables) and the migration lock. This package is the
// runner: it decides what to apply, in what order, and writes no SQL of its own.
//
// Two kinds of migration exist, both applied by Apply. The core ones create the tables
// refset needs once per database. The per-set ones create what each set needs
// beside the user's object table, such as its holds table, whose object_id column has
// the type of the set's ID and a FOREIGN KEY to it. Each applied version is recorded in
// refset_schema_version, so running a migration again does nothing, and two processes
// running it at once are serialised (by an advisory lock on Postgres, by SQLite's
// single writer).
//
// The record can outlive the tables: dropping a set's tables by hand, or a Postgres
// schema with CASCADE while refset's bookkeeping lives in another schema, leaves
// versions recorded for tables that are gone. Apply therefore checks that the tables a
// record stands for exist, and when one does not it applies that record's migrations
// again; every refset migration creates only what is missing, so this rebuilds exactly
// what was lost. A component migrated with ApplyFS is not checked: after dropping its
// tables, delete its row from refset_schema_version.
//
// The stores call Apply when a store is built, so most programs never call this
// package directly. Apply reports which component went from which version to which,
// for a program's start-up log.
//
// Where a DBA owns the schema and the application's role may not create tables, the
// stores' ExternalMigrations option makes them call Check instead: it reads the
// recorded versions and fails with a *PendingError (refset.ErrSchema) that names what
// is missing and carries the script. Pending and SQLText write that script for a DBA's
// own migration tool; it records the versions as Apply would, so a later Apply (by a
// role that may) finds nothing to do.
//
// Each migration may have a down one beside it, NNNN_name.down.sql, which undoes it.
// MigrateDown runs them for refset's own components, to undo a release or remove
// refset from a database; the up runner never reads them.
package schema
