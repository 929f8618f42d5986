// Command refset is the operators' tool for a database that refset's stores use: it
// says what the sets hold and what clean-up has left to do, why an object is kept
// alive, and whether anything leaked, without writing a line of Go.
//
//	refset status  [--json] [--cap N | --exact] --db DB  every set: objects, holds, review queue, collected; schema versions
//	refset why     [--json] --db DB --table T ID     every row that keeps object ID of set T alive
//	refset check   [--json] --db DB --table T        leaked objects and dangling references of set T
//	refset collect [--until-empty] --db DB --table T delete what nothing references
//	refset sweep   --db DB --table T [--grace D]     queue every unreachable object, then collect
//	refset migrate status [--json] [--table T ...]   each component's recorded and available version
//	refset migrate up     [--table T ...]            apply what is pending, print what was done
//	refset migrate sql    [--table T ...]            print the pending script; change nothing
//	refset migrate down   --component C --target N   undo one component's migrations down to N
//	refset holds ls [--json] [--expired] [--holder H] --table T   a set's holds
//	refset holds rm --expired [--holder H] --table T delete expired holds, by the database's clock
//	refset ui [--addr 127.0.0.1:8080] [--token T] [--cap N] --db DB   the web console (package console), which only reads
//
// ui serves on a loopback address unless --addr names another, which it refuses
// without --token (or $REFSET_UI_TOKEN): every request must then carry it, as
// Authorization: Bearer or through the cookie that /login?token=... sets. Interrupt
// stops it. Its counts, as status's, read at most --cap rows of a table. What fails
// while it serves (a page's server error, a sample of the clean-up page) it logs on
// stderr.
//
// migrate works on the sets named by --table (a table no store registered yet is
// described as its store would build it by default), or on every set refset_sets
// records. migrate sql is for a DBA who owns the schema (the stores'
// ExternalMigrations): run its output in one transaction, and migrate status then
// reports nothing pending. holds rm deletes expired holds only; a live hold is its
// holder's to unhold, so without --expired it refuses.
//
// --table names a set's object table with its schema or without, whichever way its
// store was configured: public.notes or notes on PostgreSQL, main.notes or notes on
// SQLite; in the case its store registered it (a name that differs only by case is
// refused, naming the set's table).
//
// why reads ID as text, as the set's ID column's type (a cleanup.TextID): 42 names
// the object 42 of a set of integer IDs, and an ID that column cannot hold (abc
// there) is refused as an invalid id, not answered as an object that is not there.
// why says, of an object nothing references, whether it is in the clean-up queue,
// which deletes it once it is due, or leaked: not queued, so that clean-up never
// finds it, and only a sweep deletes it (--json: "queued", "leaked").
//
// --db is a SQLite file path or file: URL (file:ledger.db, file:///var/lib/app/ledger.db,
// without parameters: refset sets the connections' own), or a PostgreSQL DSN (a
// postgres:// or postgresql:// URL, or key=value pairs): the forms store.Open takes;
// --driver pgx|postgres picks the Postgres driver (lib/pq by default). A SQLite file
// that does not exist, is empty, or is no SQLite database is refused, naming it:
// refset never creates one. A connection to PostgreSQL gives up after 10 seconds
// when neither the DSN nor $PGCONNECT_TIMEOUT sets connect_timeout (set it to wait
// longer). --replica names a hot standby of a PostgreSQL --db: status, why and check
// read it once it has replayed what the primary had committed when they began (the
// primary otherwise), so an audit of a large set loads the standby instead;
// everything else uses --db. --unprepared makes the tool prepare no statements on a
// PostgreSQL --db, as postgres.Options.Unprepared does: needed behind a pooler in
// transaction mode (PgBouncer before 1.21), which may run a prepared statement on a
// server connection that never saw it. Every command takes -h, and so do migrate and
// holds, listing theirs.
//
// status, why, check, migrate status, migrate sql, holds ls and ui only read, and install
// no clean-up triggers (those carry the grace period of the program that owns the set,
// which a tool must not change). They open a SQLite file read-only
// (sqlite.Options.ReadOnly) and leave it as they found it, byte for byte, in its
// journal mode (SQLite may create the -wal and -shm files beside a file in WAL mode,
// as any reader does). In a directory the user may not write, where SQLite cannot
// create the -shm file, a file in WAL mode without a -wal file beside it (nothing has
// it open, so everything committed is in the file) is read without locks
// (sqlite.Options.Immutable), which they say on stderr: safe while no program starts
// writing it, which one could only do as a user with the rights this one lacks. ui,
// which reads for as long as it serves, refuses instead. collect, sweep, migrate up,
// migrate down and holds rm write: on a file or directory that is read-only they say
// so. collect and sweep install clean-up as the program does (cleanup.Install), to
// follow references added since, with the grace period the set's triggers already
// apply (cleanup.Installed), or --grace if given. Every command but migrate's refuses
// a database without refset's tables (refset_sets), which migrate up creates.
//
// The text output prints a value read from the database (an object ID, a holder, a
// row's key) as it is when every character of it prints, and quoted with Go's escapes
// (strconv.Quote) otherwise, or when it begins with a quote: a newline, tab or
// terminal escape sequence in a value forges no line of the report, shifts no column,
// and reaches no terminal. --json prints each such value JSON-escaped, by the same
// rule: one that is not valid UTF-8 (SQLite keeps whatever bytes were written) or that
// begins with a quote is the JSON string of its Go-quoted form ("\"ev\\xffil\""
// for the bytes ev, 0xff, il), every other one the JSON string of the value itself;
// so a reader strconv.Unquote's a string that begins with a quote, takes any other as
// it is, and gets back the bytes stored, never a U+FFFD in place of one.
//
// An interrupt (Ctrl-C) stops a command as soon as it can, an open of the database
// included; a second one ends the process at once.
//
// Exit codes: 0 success (ui too, stopped by an interrupt, which is how it stops); 1
// check found leaked objects or dangling references; 2 the command could not do its
// job (bad usage, an unreachable database, an unknown set or object, any database
// error, an interrupt, output that could not be written). Output to a pipe whose
// reader is gone (refset status | head -1) ends the command as it ends any Unix tool:
// by SIGPIPE, which a shell reports as 141.
package main
