// Package testdb is the one fixture refset's own tests open their databases with:
// each backend a suite runs on (SQLite, PostgreSQL through lib/pq and pgx, through
// PgBouncer in transaction mode, and with a hot standby as replica), a fresh
// database per test, and cleanup through the test's own t.Cleanup.
//
// A [Backend] names one way of reaching a database. [Backend.New] makes a fresh,
// empty database for a test and returns its [Place]: a SQLite file in the test's
// t.TempDir, or a PostgreSQL schema of the test's own (internal/test/pgtest), dropped
// when the test ends. [Place.Open] opens it with the store package's public Open,
// as a program would, and may be called again for another, independent handle, as
// a second process would have; [Backend.Open] does both at once. [PlaceOf] finds
// the place of a database this package opened, for tests that reopen what a suite
// handed them. With [Options.CallersPools], Place.Open opens the database instead on
// pools the test opened itself, through the store's New, as a user would; [PoolsOf]
// gives the test those pools, and [AlsoOn] opens a second database on them, as a
// second component given the same pools would.
//
// PostgreSQL comes from internal/test/pgtest, so the rules are its own: without
// REFSET_TEST_POSTGRES (and REFSET_TEST_PGBOUNCER, REFSET_TEST_POSTGRES_STANDBY for
// those backends) the test is skipped, under CI=true it fails instead, and a server
// that is named but does not answer always fails it.
//
// The tests inside a package the stores import (refset, schema, cleanup,
// internal/stmtcache), and the stores' own internal tests, cannot import this one
// (it imports the stores): they use internal/test/pgtest for their schemas directly.
// [Fallbacks] counts the reads a Standby backend's database sent to the primary.
//
// What the suites and benchmarks share beside their databases is here too: [Block],
// the RFC's chained block they store, and [BlocksSchema], its tables, written once
// for every dialect with the column types of [Backend.Types]; [Column] reads a
// query's one column and [RunCollector] runs a collector in the background and keeps
// what its passes said. A plan guard is refsettest's (refsettest.PlanGuard), as a
// user's tests have it.
package testdb
