// Package postgres keeps a refset.RefSet in PostgreSQL, through lib/pq or pgx's
// stdlib driver: Open dials a DSN with either (Options.Driver), and New uses a
// *sql.DB the caller opened and owns: with the guards of Open's pools, which never
// run a statement again after its connection was lost once the statement was sent,
// sql.OpenDB of NewConnector(dsn) on lib/pq, of NewPgxConnector(cfg) on pgx, or of
// NewPgxPoolConnector(pool) from a pgxpool.Pool. New refuses a lib/pq pool without
// them; it takes a pgx pool without them (stdlib.OpenDB, stdlib.OpenDBFromPool),
// on which refset's own work is safe but the caller's own statements are not.
// store.Open dials a postgres:// URL or key=value DSN here when given this package's
// Options. Errors are translated by SQLSTATE in one place, the same on both drivers.
//
// A call waits about as long as its context, on either driver, even on a server that
// accepted the connection and then stopped answering (a hung host, a proxy whose
// backend froze): pgx closes the connection when the context ends; on the lib/pq
// connections of Open's pools and NewConnector's, lib/pq's cancel request has a
// second to end the statement, and then the connection is closed. The call returns
// the context's error; a COMMIT given up on so may still run on the server, and is
// resolved as a lost one (Options.ResolveCommitWait).
//
// Several processes may share one database: nothing here relies on in-process state
// for correctness. Foreign keys with ON DELETE RESTRICT make the database refuse to
// delete a referenced object; inserting a reference takes a KEY SHARE lock on the
// object's row, which conflicts with its deletion, so "hold" and "collect" are
// serialised by Postgres itself.
//
// store.NewStore maps a struct to an existing table (optionally schema-qualified)
// through its `db` tags, checks both against the catalog, and creates the set's holds
// table beside it; it and store.NewCollector take a *DB as they take any store's
// database. Declare a string key text (or varchar without a length). A key of type
// numeric, uuid, char(n), bpchar, varchar(n), name or citext takes a string ID type
// too, but stores some strings as another value, or holds two equal: numeric reads
// "0012", "+12", "1e5" back as "12" or "100000", and numeric(10,2) "12" as "12.00"
// and "12.345" as "12.35", rounded; numeric holds "12.0" equal to "12"; uuid reads
// upper case back lower case; char(4) pads "ab" to "ab  "; varchar(4) cuts "abcd "
// to "abcd" silently; name cuts past 63 bytes; bpchar holds "a " equal to "a", and
// citext "AB" equal to "ab". Each call that sends such an ID refuses it with
// refset.ErrInvalidID before it writes anything; an ID spelled as the key writes it
// back ("12", "12.35" in numeric(10,2), "NaN", a lower-case uuid, four characters in
// char(4), a lower-case citext) is taken. Options embeds store.Options, the options
// every store takes (logging, metrics, the statement cache, external migrations),
// beside PostgreSQL's own.
//
// A store runs its own statements prepared (database/sql prepares each once per pooled
// connection): its reads outside a transaction (a cache miss, Has), and its inserts,
// holds and unholds in the transactions DB.Begin opens, refset.InTx's among them. That
// is one round trip a statement instead of two (lib/pq parses an unprepared statement
// with arguments in a round trip of its own). The statements of refset.Exec commands
// run prepared in those transactions too, once they have run twice: a bounded number of
// them per connection (Options.StatementCache). On pgx, a lookup by key outside a
// transaction (a cache miss, Upgrade's check) runs on pgx itself, through pgx's own
// statement cache, and pgx scans the row straight into the object's fields, without
// database/sql's conversions; anything that fails there (a broken connection, a value
// only database/sql converts) is read again through database/sql, as before. On pgx,
// a hand-over made only of Exec commands is sent in batches: BEGIN with the first
// statements, a new batch after each statement whose row count refset checks, and
// COMMIT with the last. Where lost commits are resolved (Options.ResolveCommitWait, on
// by default), the commit's ticket goes before COMMIT with a Flush between them, so
// that its answer leaves the server before COMMIT runs (a server sends a batch's
// answers only at its end: a ticket sent with COMMIT is lost with COMMIT's answer); in
// a query mode that cannot send a Flush (simple_protocol, describe_exec,
// cache_describe), COMMIT goes in a batch of its own, one round trip more. Without
// resolution, one batch at the default isolation level sends neither BEGIN nor COMMIT
// and is committed at its Sync, as an implicit transaction. Either way a hand-over of
// INSERTs, UPDATEs and DELETEs is one round trip. On lib/pq, such a hand-over (and an Add) goes in two round trips:
// one simple query with BEGIN, the commit's ticket and the statements, EXECUTEd
// (prepared once a connection with SQL's PREPARE) with their arguments as literals
// where a literal means what lib/pq would send, and COMMIT; a unit with an argument
// that has no such literal runs as before (see docs/postgres.md). Named prepared
// statements need a connection that stays the same server session: connect directly or through a
// pooler in session mode, or set Options.Unprepared. A prepared read that fails is run
// again unprepared, so a migration that changes a column's type does not break reads.
// A caller may drop the statements prepared on a connection (DEALLOCATE, DISCARD ALL)
// and go on using refset on it: on lib/pq and on pgx pools with refset's guard
// (Open's, NewConnector's, NewPgxConnector's, NewPgxPoolConnector's), refset and the
// driver drop the rest and prepare theirs again, and a statement the server refuses
// as gone ran nothing, runs again, or has its unit of work run again. On a pgx pool
// without the guard (stdlib.OpenDB), only units of work and refset's own use of pgx
// do: a read outside one fails once for each statement pgx had prepared.
//
// # Reads from a hot standby
//
// Options.ReplicaDSN (or the caller's pool in Options.Replica) names a hot standby
// that streams from the primary. Reads that a lagging copy cannot make wrong go to it
// first, and each read decides when to ask the primary instead:
//
//   - Get (a cache miss) and Upgrade without commands look an object up by ID. A row
//     the standby has is the object, however far behind the standby is, because
//     objects never change; a row it lacks may not be replayed yet, so the primary is
//     asked. A read right after the caller's own Add therefore finds the object.
//   - blockmanager's walks (Branch, BranchDiff, CommonAncestor) trust the blocks and
//     links they find on the standby, and go on from the primary wherever the walk
//     would end short of genesis (a tip, a block or a link not replayed yet).
//   - cleanup's reports (Check, Why, WhyAll, Status) read the standby once it has
//     replayed every WAL record the primary had written when the report began
//     (ReplicaCaughtUp: pg_current_wal_insert_lsn() on the primary, then
//     pg_last_wal_replay_lsn() on the standby), waiting up to Options.ReplicaWait (one
//     second) for it, and the primary otherwise. They see the caller's own writes.
//
// Writes, every read inside a transaction (the *Tx forms, commands, refset.InTx), and
// reads of what changes (holds, a chain's head, the review queue, ContainsAny*) go to
// the primary. So what may be stale is bounded: an object deleted by clean-up on the
// primary within the standby's replay lag may still be found by Get or Upgrade, as it
// could have been a moment earlier on the primary; a token never kept an object alive,
// a persisted reference does. A standby that fails a read (it is down, or cancelled the
// query for a conflict with recovery) leaves that read to the primary; set
// connect_timeout in ReplicaDSN so a standby that does not answer costs little. Each
// fallback is told to Options.Observer (ReadFellBack). hot_standby_feedback=on on the
// standby spares long reports cancellations.
//
// Open and New check the replica once: it must be a standby (pg_is_in_recovery()), of
// the same cluster (pg_control_system()'s system identifier, when the role may read
// it), connected to the same database with the same search_path; refset.ErrInvalidConfig
// otherwise, and refset.ErrUnavailable when it cannot be reached. A standby promoted
// later has no replay position, so reports leave it to the primary, but Get, Upgrade
// and walks still read it: after a failover, open the database again with the new
// topology.
//
// # Failover
//
// On a high-availability cluster (Patroni, pg_auto_failover: a primary and standbys
// that take over), give Open a multi-host DSN that only a primary accepts, which
// lib/pq and pgx both read:
//
//	host=db1,db2,db3 port=5432,5432,5432 dbname=app target_session_attrs=read-write connect_timeout=2
//
// After a failover the first calls fail with refset.ErrUnavailable, having changed
// nothing, and the next find the new primary. The pools Open makes drop a connection
// to a server that no longer takes writes (SQLSTATE 25006, a standby refusing BEGIN
// READ WRITE, or on pgx a server that reports itself read-only); so do lib/pq pools of
// NewConnector, and on a caller's pgx pool refset leaves such a connection before each
// unit of work and each statement that commits on its own. A COMMIT whose
// connection was lost is not left unknown: refset asks a primary on a new connection
// whether the transaction committed (Options.ResolveCommitWait), returns nil if it did
// and ErrUnavailable if it did not, and refset.ErrCommitUnknown only when no server
// could tell. A statement that commits on its own (a component's one-statement write,
// run through refsetdriver.OwnCommits: custody's payments) is not left unknown either:
// refset waits, on a primary, until it can no longer commit (its server session is
// ended, pg_terminate_backend), and the component's own query tells from its rows
// whether it did. store.Options.RetryUnavailable runs a unit of work that certainly did
// not commit again, riding through the failover. Nothing acknowledged survives a
// failover unless replication is synchronous: see "Running on a high-availability
// cluster" in SCALING.md for the settings and the figures of the failover soak.
//
// # Behind PgBouncer in transaction mode
//
// A pooler in transaction mode (PgBouncer's pool_mode = transaction) lends a server
// connection for one transaction, or for one round trip outside a transaction, so
// nothing a session keeps survives from one to the next. Open the database with
// Options.Unprepared. It makes three differences:
//
//   - Stores prepare nothing: PgBouncer keeps no prepared statements before 1.21 (and
//     from 1.21 only with max_prepared_statements set).
//   - Open sets the driver to send each statement with its arguments in one round trip
//     that names no prepared statement: lib/pq's binary_parameters=yes, pgx's
//     default_query_exec_mode=exec. lib/pq's default parses a statement in one round
//     trip and binds and runs it in the next; outside a transaction the pooler may
//     lend the second to another server connection, which then runs the statement
//     another client parsed there last, with this one's arguments: wrong rows, not an
//     error (TestPooledReadsRunTheirOwnStatements). pgx's default statement cache
//     prepares statements, which the next server connection lacks. New, with a pool of
//     the caller's, refuses one without these settings (refset.ErrInvalidConfig).
//   - Statements are parsed and planned on every call: a read costs more server time
//     than a prepared one (with pgx about 1.8 times, measured directly on a local
//     server; with lib/pq binary_parameters saves a round trip, so it costs less).
//
// Nothing else refset does needs a session: its advisory locks (the migration lock,
// blockmanager's) are transaction-scoped (pg_advisory_xact_lock), its SET CONSTRAINTS
// is inside a transaction, and it uses no session SET, LISTEN/NOTIFY, temporary tables
// or cursors WITH HOLD. The search_path must then come from the role or the database
// (ALTER ROLE ... SET search_path), not from the DSN: PgBouncer 1.18 refuses startup
// parameters other than the few it tracks itself (later versions can track more, with
// track_extra_parameters), or quietly drops those its ignore_startup_parameters lists.
// Qualified table names (store.Config{Table: "ledger.blocks"}) need neither.
//
// PgBouncer 1.18 (Debian 12's) may crash when a client cancels a statement, as lib/pq
// does whenever a context ends while a statement runs (pgbouncer#801, fixed in 1.19.1).
// pgx, by default, closes the connection instead, sending its cancel request as it
// closes, with time to complete; and with Options.Unprepared refset's pipelined units
// on pgx send none of their own (one abandoned because its statement ended first is
// the likely trigger of a PgBouncer crash seen in CI). Use PgBouncer 1.19.1
// or later, or pgx, where contexts end mid-statement (a clean-up Run stopped by its
// context, a request's deadline).
//
// scripts/test.sh runs the conformance suites, blockmanager's and custody's through
// PgBouncer 1.18 in transaction mode (internal/test/pgtest.NewPooled).
package postgres
