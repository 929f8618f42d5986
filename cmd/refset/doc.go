// Command refset is the operators' tool for a database that refset's stores use: it
// says what the sets hold and what clean-up has left to do, why an object is kept
// alive, and whether anything leaked, without writing a line of Go.
//
//	refset status  [--json] --db DB                  every set: objects, holds, review queue; schema versions
//	refset why     [--json] --db DB --table T ID     every row that keeps object ID of set T alive
//	refset check   [--json] --db DB --table T        leaked objects and dangling references of set T
//	refset collect [--until-empty] --db DB --table T delete what nothing references
//
// --db is a SQLite file path, or a PostgreSQL DSN (a postgres:// or postgresql:// URL,
// or key=value pairs); --driver pgx|postgres picks the Postgres driver (lib/pq by
// default). A SQLite file that does not exist is an error, never created. Every
// command takes -h.
//
// status, why and check only read: they install no clean-up triggers (those carry
// the grace period of the program that owns the set, which a tool must not change).
// collect installs clean-up as the program does (cleanup.Install), with --grace.
//
// Exit codes: 0 success; 1 check found leaked objects or dangling references; 2 the
// command could not do its job (bad usage, an unreachable database, an unknown set or
// object, any database error).
package main
