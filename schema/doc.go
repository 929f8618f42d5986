// Package schema holds refset's own SQL, per dialect, embedded in the binary and
// versioned.
//
// Two kinds of migration exist. The core ones (Migrate) create the tables refset
// needs once per database. The per-set ones (MigrateSet) create what each set needs
// beside the user's object table, such as its holds table, whose object_id column has
// the type of the set's ID and a FOREIGN KEY to it. Each applied version is recorded in
// refset_schema_version, so running a migration again does nothing, and two processes
// running it at once are serialised (by an advisory lock on Postgres, by SQLite's
// single writer).
//
// The stores call MigrateSet when a store is built, so most programs never call this
// package directly.
package schema
