// Package engine is the part of a store's database that does not depend on the
// dialect: beginning refset's write transactions (with the statement cache of Exec
// commands), refusing calls once closed (and naming a closed database's errors
// ErrClosed), closing what the database owns, and carrying its Driver. store/sqlite and store/postgres embed an Engine in their DB
// and give it what differs: how to begin a transaction on their pools, and what
// closing means.
//
// # Group commit
//
// A store whose writes all go through one connection (SQLite) may ask for group
// commit (Config.Group): units of work waiting for the writer share one transaction
// and one COMMIT, so one fsync, instead of one each. The writer is handed from unit
// to unit (group.go): each runs on its own goroutine, as before, in a SAVEPOINT of
// its own inside the shared transaction (but for a group's first unit, which needs
// none: if it fails, the transaction goes, losing nothing else). A unit that ends passes the writer on: to a unit already waiting, in the
// same transaction, while the group has taken fewer than Group.MaxUnits and is
// younger than Group.MaxAge; otherwise it commits the group itself and frees the
// writer, for a waiting unit to begin a new group. The waiting line is two channels:
// a token channel that holds the writer while it is free, and an unbuffered hand-off
// channel, which only a unit already waiting receives from. A group is thus made only
// of units that were waiting when the one before finished: one goroutine alone
// neither waits nor pays a savepoint.
//
//   - A unit that fails (its function's error, a Command's refusal, a panic, its
//     context ending, Rollback) rolls back to its savepoint alone; the group goes on.
//     (A group's first unit has no savepoint: its failure rolls back the
//     transaction, and the next unit begins another. So a group is passed on only
//     once its first unit was kept, and every later unit runs in a savepoint.)
//     A unit left open is rolled back when its context ends, as database/sql does.
//   - A unit's Commit releases its savepoint and returns once the group's COMMIT did:
//     nil only then. refset runs what waits for a commit (AfterCommit: leases
//     published to the cache, ...) only after Commit returned nil.
//   - If the shared COMMIT fails, every unit of the group gets its error, translated
//     as any COMMIT's: on SQLite a disk error (ErrUnavailable) becomes
//     ErrCommitUnknown in refset (the log may hold the commit); anything else (a
//     busy database, ErrConflict) committed nothing. But when the database refused
//     the COMMIT for what one unit wrote (a deferred foreign key, checked only
//     then), each unit of a group of several gets ErrConflict marked
//     refsetdriver.RunAlone: refset.InTx runs it again with a context marked
//     refsetdriver.Alone, and such a unit gets a transaction no other unit joins.
//     The unit that wrote it then fails alone, with the constraint's error, and the
//     others commit.
//   - If the shared transaction is lost before its COMMIT (a savepoint statement
//     fails, or Group.Watch says the database ended it on its own: SQLite rolls the
//     whole transaction back on an interrupted write, and may on a full disk or an
//     I/O error), every unit whose work was in it gets ErrConflict, which refset.InTx
//     runs again: nothing of it committed. Watch is asked before each statement of a
//     unit and before the writer passes on: a statement sent after the rollback would
//     commit on its own, and so would the next unit's, its SAVEPOINT opening a new
//     transaction; the statement fails instead, and the writer passes to no one.
//   - A group's first unit waits for the writer's connection (Group.Conn) while its
//     context lasts, as a unit without group commit does; reads may hold it.
//   - A unit whose context ended before its Commit rolls back, and Commit returns the
//     context's error, as database/sql's Tx.Commit does.
//   - The handle a unit gets cannot end the group: COMMIT, ROLLBACK, BEGIN and any
//     statement naming the group's savepoint fail with ErrInvalidCommand, unsent; it
//     ends once, and its statements fail after that.
//   - A unit that joined a group holding others' work and sends no statement for
//     Group.Evict (it blocks, perhaps on the return of a unit before it, which waits
//     for the group) is rolled back with ErrConflict, which InTx runs again, and the
//     group commits without it. A unit busy with statements is never evicted, nor
//     one whose query the database is still computing as its rows are read (SQLite
//     computes an aggregate inside Scan, after the statement returned): a probe of
//     the connection, which waits while the driver works, tells it.
//   - Group.InterruptRollsBack: a write cut short by its context rolls back the
//     whole transaction on SQLite, so a unit's statements that may write run to
//     their end once others' work is in the transaction, and its context ends it
//     between statements. A statement Group.Classify says only reads
//     (StatementReads) runs with its context: cut short, it fails alone. When in
//     doubt, a store's Classify says a statement writes.
//   - One unit's outcome never rests on another's work: a unit is told it committed
//     exactly when, alone, it would have. What the database checks only at COMMIT
//     (SQLite's deferred foreign keys), and does not tell per unit, could be left
//     violated by one unit and made good by a later one of its group. So a unit that
//     may leave such a violation never shares a transaction: Group.Apart, asked on
//     the group's transaction before the writer first passes on inside it (only when
//     a unit waits to join: a unit alone pays nothing), and again after a unit's
//     StatementSchema (DDL), ends the group when it says so (SQLite's: while the
//     schema has a deferred key; one PRAGMA per group, the schema read again only
//     when it changed). Group.Classify sees every statement of every unit, before it
//     is sent, and queries nothing. A statement it marks StatementAlone (PRAGMA
//     defer_foreign_keys, DDL declaring a deferred key) runs only in a unit that has
//     the transaction to itself: sent by a group's first unit, the group takes no
//     unit after it; sent by a unit that joined a group holding others' work, it is
//     not sent, and the unit is rolled back with ErrConflict marked
//     refsetdriver.RunAlone, which refset.InTx runs again in a transaction of its
//     own; the group commits without it.
//
// Units of work already inside one (refset.InTx's context) never reach Begin: they
// join their unit under a savepoint, as without group commit.
//
// # Invariants of group commit
//
// What ties group.go's mechanisms together; each is checked by the store/sqlite test
// named after it.
//
//  1. One holder. At any moment at most one unit holds the writer (the turn), or no
//     unit does and a group ends. Only the holder touches its batch (the
//     transaction's statements, units, kept, lost): it runs its own statements, then
//     ends, and in ending passes the writer on or ends the group. Two others act for
//     a unit that has not ended, each under the unit's lock held for writing, which
//     its statements hold for reading: its context's end and its eviction for
//     idleness, which end it as its Rollback does. The eviction's probe of the
//     connection (SELECT 1) is the one statement that runs beside the unit's; it
//     changes nothing. (TestGroupCommitInvariants, TestGroupCommitEvictsBlockedUnit,
//     TestGroupCommitKeepsBusyUnit.)
//  2. One door. Every statement of a unit goes through the unit (Member.Enter, called
//     by sqlstore.Tx, which has no other way to reach the transaction): none runs
//     once the unit ended, none ends the shared transaction or names the group's
//     savepoint, and each counts as activity. (TestGroupCommitUnitHasOneDoor,
//     TestGroupCommitHostileUnit, TestGroupCommitKeepsUnitBusyWithPreparedStatements.)
//  3. Kept. A unit is kept when all its statements stand in the group's transaction
//     and it asked to commit: a unit without a savepoint at its Commit, one with a
//     savepoint once its RELEASE succeeded. A kept unit's work goes only with the
//     whole transaction, and then every kept unit of it is told so. A unit that
//     failed is undone alone (ROLLBACK TO its savepoint), or, without one, with the
//     transaction, which then holds no kept unit's work. (TestGroupCommitInvariants.)
//  4. Standing transaction. The writer passes to the next unit inside the group's
//     transaction only while that transaction stands (no savepoint statement failed,
//     and Group.Watch says the database did not end it) and may grow (not alone,
//     fewer than MaxUnits, younger than MaxAge), and only to a unit already waiting;
//     otherwise the group ends (COMMIT if a unit was kept, ROLLBACK if not) before
//     the next unit gets the writer. No statement of a unit is sent once the database
//     ended the transaction. (TestGroupCommitToldCommittedExactly.)
//  5. Told committed exactly. A unit's Commit returns nil only once the COMMIT of the
//     transaction that holds all its statements returned nil, and it was kept in it;
//     every other unit is told it failed, and nothing of it committed. A unit whose
//     context ended before its Commit rolls back. (TestGroupCommitToldCommittedExactly,
//     TestGroupCommitEndedContextRollsBack, TestGroupCommitSurvivesKill,
//     TestDeferredForeignKeyFailsItsUnitAlone, TestDeferredViolationNotMaskedByAnotherUnit,
//     TestGroupCommitQueryHonoursContext.)
//  6. Waiting ends with the context. A unit waits for the writer, and a group's first
//     unit for the connection, only while its context lasts.
//     (TestGroupCommitBeginHonoursContext.)
package engine
