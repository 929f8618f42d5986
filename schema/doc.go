// Package schema is refset's migrator: it keeps refset's own tables, each set's, and
// a program's own migrations at their versions, in the style of river's
// rivermigrate. Make a Migrator with New(db, Config) and run it with
// Migrate(ctx, DirectionUp or DirectionDown, opts), which returns what ran; Validate
// says whether the database is at the versions the code needs.
//
//	m, err := schema.New(db, schema.Config{
//		Components: []schema.Component{{Name: "myapp", Migrations: files}}, // fs.Sub of an embed.FS
//		Sets:       []schema.Set{{Table: "notes"}},
//	})
//	res, err := m.Migrate(ctx, schema.DirectionUp, nil)
//	log.Printf("migrated: %s", res) // "core 0 -> 2, myapp 0 -> 3, set:notes 0 -> 3"
//
// Three kinds of component are recorded, each with its version, in
// refset_schema_version. refset's core ("core") creates the tables refset needs once
// per database; every Migrator covers it, first. A set's ("set:<table>") creates what
// the set needs beside the object table: its holds table, whose object_id column has
// the type of the set's ID and a FOREIGN KEY to it, and its review queue; the set is
// registered in refset_sets, where clean-up and the operators' command find its
// tables. A Component is a program's or a package's own folder of NNNN_name.sql files,
// recorded under its Name: blockmanager and examples/custody keep their tables this
// way. They run in that order, the Components before the sets (whose object tables they
// create), but those with AfterSets after them.
//
// Why a migrator of refset's and not the program's own tool: the set migrations are
// templates written for each set's table and ID type, which the migrator reads from
// the catalog; a migration of refset's own tables, in a later release, must run
// before the code that needs it; and processes starting together must not run a
// migration twice. Migrate runs in one transaction behind a lock (an advisory lock on
// PostgreSQL, SQLite's single writer): a second process waits, then finds nothing to
// do. A version recorded is never applied again.
//
// The stores migrate a set's tables themselves when it is built (store.NewStore), so
// a program that only uses sets needs no Migrator; one with tables of its own, or one
// that migrates before it serves, uses one at start-up, and may log its result.
//
// The record can outlive the tables: dropping a set's tables by hand, or a PostgreSQL
// schema with CASCADE while refset's record lives in another schema, leaves versions
// recorded for tables that are gone. An up migration therefore checks that the tables
// refset's core and each set's record stands for exist, and when one does not it runs
// that component's migrations again; each of refset's creates only what is missing,
// so this rebuilds exactly what was lost. A Component's tables are not checked: after
// dropping them, take it down or delete its row from refset_schema_version.
//
// Where a DBA owns the schema and the application's role may not create tables, the
// stores' ExternalMigrations option makes NewStore call Validate instead of migrating:
// it reads the recorded versions and fails with a *PendingError (refset.ErrSchema)
// whose Plan is what is missing, with the script. A dry run
// (MigrateOpts{DryRun: true}) returns the same without the error, changing nothing
// and taking no lock, for a DBA's own migration tool: its SQL() records the versions
// and registrations as Migrate would, so a later Migrate (by a role that may) finds
// nothing to do. A dry run reads each set's ID type from the catalog, so a set's
// object table must exist before one, even where a Component would create it.
//
// A Component's versions need not follow each other (a gap, where a migration was
// dropped, is fine, up and down), but each is used once, none is above 2147483647
// (what refset_schema_version records: not a timestamp), and no file is empty (one
// meant to do nothing says so in a comment); New refuses a folder that breaks one of
// these, or has a down file without its up one, before anything runs.
//
// Each migration may have a down one beside it, NNNN_name.down.sql, which undoes it.
// DirectionDown runs them for one component (MigrateOpts.Component), to a
// TargetVersion or by MaxSteps (one step by default), to undo a release or remove
// refset from a database; an up migration never reads them.
//
// The SQL of refset's own components belongs to each store (store/sqlite and
// store/postgres embed their dialect's files, in sql/schema/ of their folder, with
// every statement on refset's tables and the migration lock: the database's
// Driver().SchemaSQL()); this package decides what runs, in what order, and writes
// no SQL of its own.
package schema
