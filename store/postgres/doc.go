// Package postgres keeps a refset.RefSet in PostgreSQL, through lib/pq or pgx's
// stdlib driver: Open dials a DSN with either (Options.Driver), and New uses a
// *sql.DB the caller opened and owns (from a pgxpool.Pool: stdlib.OpenDBFromPool).
// Errors are translated by SQLSTATE in one place, the same on both drivers.
//
// Several processes may share one database: nothing here relies on in-process state
// for correctness. Foreign keys with ON DELETE RESTRICT make the database refuse to
// delete a referenced object; inserting a reference takes a KEY SHARE lock on the
// object's row, which conflicts with its deletion, so "hold" and "collect" are
// serialised by Postgres itself.
//
// NewStore maps a struct to an existing table (optionally schema-qualified) through
// its `db` tags, checks both against the catalog, and creates the set's holds table
// beside it.
//
// A store runs its own statements prepared (database/sql prepares each once per pooled
// connection): its reads outside a transaction (a cache miss, Has), and its inserts,
// holds and unholds in the transactions DB.Begin opens, refset.InTx's among them. That
// is one round trip a statement instead of two (lib/pq parses an unprepared statement
// with arguments in a round trip of its own). The statements of refset.Exec commands
// run prepared in those transactions too, once they have run twice: a bounded number of
// them per connection (Options.StatementCache). On pgx, a hand-over made only of Exec
// commands is sent in batches: BEGIN with the first statements, COMMIT with the last,
// a new batch after each statement whose row count refset checks. Named prepared statements
// need a connection that stays the same server session: connect directly or through a
// pooler in session mode (PgBouncer's transaction mode keeps them only from version
// 1.21, with max_prepared_statements set), or set Options.Unprepared. A prepared read
// that fails is run again unprepared, so a migration that changes a column's type does
// not break reads.
package postgres
