// Package postgres keeps a refset.RefSet in PostgreSQL, through lib/pq.
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
package postgres
