// Package cleanup deletes the objects of a set that nothing references any more, at a
// cost that follows the garbage, never the size of the set.
//
// It needs to be told nothing about who references what: Install reads every FOREIGN
// KEY that points at the set's table from the database catalog. A key from the table
// to itself (a block's predecessor) is an edge; every other referencing table (the
// set's holds table, a chain_heads table) is a root. A key declared ON DELETE CASCADE
// says its rows are part of the object (a block's list of batch IDs), not holders of
// it: it keeps nothing alive, and its rows go with the object. Since a holder declared
// CASCADE by mistake would let clean-up delete the objects it means to hold, the
// program names the tables whose rows are parts (Config.Parts, kept in the database
// for the tools that only read); any other cascading key to the set is a warning at
// every Install and in Check's report and Status, or, with
// Config.RefuseUndeclaredParts, Install's refusal. A key that would
// refuse an object's deletion but does not reference the ID column alone (a key to
// a UNIQUE column, a composite key) cannot be followed, so Install refuses it with
// refset.ErrSchema, by name, rather than leave Collect to trip over it. It refuses a
// referencing column without an index too, since every review would scan its table
// (ErrUnindexed, as an *UnindexedError that holds the CREATE INDEX statements to run).
// Declare holders' keys ON DELETE RESTRICT, as refset's own tables do: on PostgreSQL a
// key left at the default, NO ACTION, makes every deletion probe the object's table
// once more before it probes the referencing one (it allows a new row with the same
// key, which an immutable object never gets), about a fifth of what collecting costs
// per object; Install logs a warning that names each such key (Reference.NoAction).
//
// Install creates database triggers on every referencing table: whenever a reference
// row is deleted, or its key changed, by refset or by plain SQL, the object it pointed
// at is put in the set's review queue. A new object is queued one grace period ahead,
// so a holder that persists its reference a little after adding the object is not
// robbed of it. The first Install on a set (or one after its triggers were dropped)
// queues the objects already there the same way, a grace period ahead, in pages of
// BatchSize, each page its own short transaction: a collector started late, on a set
// a program filled without it, reviews them all, and Check is clean from the start. Queueing never loses a signal: a second one for the same object
// postpones the review to the later time and marks the entry changed. On PostgreSQL
// every name the triggers use is qualified with its schema, resolved at Install, so
// they work whatever the search path of the session that fires them; installing
// again rewrites the functions of triggers an earlier Install made.
//
// On PostgreSQL the triggers run once per statement, at its end, and queue only what
// may be garbage then: not an object the same statement deleted along with its
// reference, nor a new object the same statement also referenced. A statement that
// hands references over, such as a token spend that deletes the spent tokens with
// their holds and creates the outputs with theirs, then gives clean-up no work.
//
// Collect takes due entries in bounded batches, each its own short transaction. It
// locks the objects (on Postgres FOR UPDATE SKIP LOCKED, which conflicts with the
// KEY SHARE lock a concurrent reference insert takes, so holding and collecting are
// serialised by the database), checks again that nothing references them, deletes
// them, and so queues what they referenced: an abandoned fork of any length goes in
// one Collect call. A batch follows that itself: an object that only the objects it
// deletes referenced (the next block down an abandoned chain) is reviewed and
// deleted in the same batch, so a chain costs a batch per BatchSize blocks, not a
// batch per block. The walk stops at an object anything else keeps: a root, another
// object, a review not yet due (a new object's grace period). Several collectors,
// goroutines or processes, share the work without waiting on each other. Expired
// holds are deleted by the same pass, which makes their objects due. Collect whose
// ctx ends returns ctx's error; what committed stays done.
//
// # A schema that changes while clean-up runs
//
// Operators add tables that reference the set while programs run. The plan a
// collector works on records the foreign keys to the set's table as they were when it
// was made (a fingerprint: on PostgreSQL the keys' constraints and actions, on SQLite
// the schema version), and every batch that deletes objects reads them again before
// it commits, after its deletes took their locks, so that a key added meanwhile is
// seen (one catalog read per such batch). If they changed, the batch rolls back:
// a key ON DELETE SET NULL or SET DEFAULT refuses no delete, it empties its rows'
// references, so what it held would be lost. The same Collect then reads the catalog
// and installs for the new key, as Install would but keeping the grace period the
// database has, lists it in Stats.Followed, and collects on the new plan. An object
// the database refuses to delete is counted (Stats.Refused) and its key followed the
// same way; in a batch that deleted nothing else, it stays queued a grace period
// later, and holds up nothing else.
// No restart is needed, and no signal is lost meanwhile: the new table's triggers
// matter only for an object that is not deleted because of it, and no batch deletes
// on a plan that does not know the key. (On PostgreSQL with Options.Isolation
// REPEATABLE READ or SERIALIZABLE, the batch reads the keys on its snapshot, taken
// before its delete's locks: a key committed in between is missed there. Keep the
// default, READ COMMITTED, where keys to a set are added while collectors run.)
// Collect installs, rather than only telling the program to, because it is safe
// beside concurrent writers: on PostgreSQL it replaces the bodies of existing
// trigger functions, which locks no table, and creates triggers only on the new table
// (CREATE TRIGGER takes SHARE ROW EXCLUSIVE there: that table's writers wait for the
// short transaction, no one else); it drops only the triggers of references that are
// gone (see below). On SQLite, installing a plan unchanged changes nothing in the
// schema, so collectors do not make each other's plans stale. A key it cannot follow (a column without an index,
// ErrUnindexed with the CREATE INDEX to run; a key Install refuses, refset.ErrSchema)
// fails that Collect and every later one before it collects anything, until the
// schema is mended, since collecting would scan that table for every object. Run
// passes a missing index to its callback and goes on (a Run without one stops after
// MaxFailedPasses, saying what to create); a key Install refuses stops it at once, as
// a dropped table does.
//
// A referencing table dropped or renamed, or its column renamed, while clean-up runs
// leaves the collector's plan naming what is gone: the batch that finds out fails
// and rolls back, and the same Collect reads the catalog again, installs for what it
// finds, and goes on. Installing drops the triggers refset made for a reference
// that is gone (on a table renamed, or whose column was renamed or its key dropped),
// with their functions, so that none names a column that is no more (on PostgreSQL
// such a trigger failed every delete from its table). Until then, writes to the set
// go on: on PostgreSQL the set's trigger for new objects, which probes the
// referencing tables, queues every new object when a table or column it names is
// gone, rather than fail the insert. The rows of
// a reference that went stopped holding their objects with no trigger to say so, so
// that Collect then queues the set's objects, a grace period ahead, as the first
// Install does (a cost that follows the size of the set, once per such change and
// collector). A key SQLite checks only at COMMIT (DEFERRABLE INITIALLY DEFERRED),
// added since Install, fails a batch's commit rather than its delete, and is
// followed the same way. Only a table of the set itself gone (its object table, its
// holds table, its review queue) is refset.ErrSchema.
//
// The reports read the catalog as it is at each call: Check and Why count every table
// that references the set, one added since Install or one without an index included
// (they answer, reading such a table whole, and say which index is missing:
// Report.Unindexed, Collector.Unindexed).
//
// Run calls Collect every interval. It returns at once on an error no retry mends, a
// closed database (refset.ErrClosed) or a table or column of the set gone
// (refset.ErrSchema); any other failed pass goes to its callback, or, with none,
// ends Run after MaxFailedPasses in a row, so a failing collector is never silent.
//
// Status (and Counts, and a Counter, which a console's sampler keeps) reports every
// set's objects, holds and queue in one statement that reads no table whole: each
// count stops at a cap (StatusOptions.Cap, DefaultCountCap rows) and, past it, is the
// database's estimate from its statistics (Count, Estimated) or a lower bound where
// it has none (MoreThan); the expired holds and the entries due now are counted over
// their index's range, as many as clean-up has yet to do. StatusOptions.Exact counts
// every row, reading each table whole. Collect counts the objects it deletes where it
// deletes them: each batch adds its count to the set's in refset's own tables
// (refset_collected, core schema version 2), in the batch's transaction, so that
// SetStatus.Collected is exact whoever collected, and survives restarts; its rise
// between two reads is the rate of collection.
//
// Sweep is the repair: a full mark from the roots, for a database whose queue was
// lost or never installed. Check reports what Collect would never delete (objects
// reachable from no root and no queued object) and references to missing objects;
// both are zero in a healthy database. Why says which rows keep an object alive.
//
// # Where things are
//
// The package is split as containerd splits its garbage collector, so that each part
// can be read, and changed, without the others:
//
//   - collect.go is the algorithm: Collect's batches, which follow the garbage from the
//     review queue, and Sweep, the full mark from the roots.
//   - install.go binds it to storage: Install and Inspect read the set's registration
//     and the catalog into a plan (describe), and Install creates the triggers.
//   - run.go is the schedule: Run, and when a failing collector gives up.
//   - report.go and status.go are the read-only reports: Check, Why, WhyAll and Queue
//     on one set, Status, Counts and Counter on a whole database; onReplica
//     (report.go) says where they read.
//   - collector.go holds what they share: Config, the Collector and its errors.
//
// None of it runs SQL of its own. A store's clean-up dialect
// (refsetdriver.CleanupDialect, found through the database's driver) writes every
// statement: the catalog reads, the triggers, a batch, the sweep's mark, and the
// reports' reads of refset's tables (written once for both stores in
// store/internal/cleanupsql). (The CREATE INDEX statements of an
// UnindexedError are written here, for the user to run.) What only a
// store implements or calls (the dialect, Plan, Batch, Clock, UnfollowedKeys) is in
// package refsetdriver, not here.
package cleanup
