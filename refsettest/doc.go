// Package refsettest helps the tests of programs that use refset: a throwaway
// PostgreSQL database, a guard on its query plans, and assertions about what clean-up
// sees. A throwaway SQLite database is in the sub-package refsettest/sqlitetest, so
// that this package builds without cgo (CGO_ENABLED=0) for a program that uses
// PostgreSQL only.
//
// # Databases
//
// sqlitetest.Open opens a database file in the test's temporary directory and
// closes it when the test ends. [Postgres] creates a schema of its own for the test on the
// server named by the REFSET_TEST_POSTGRES environment variable ([EnvPostgres]),
// opens the database with every connection's search_path set to that schema only,
// and drops the schema (CASCADE) when the test ends. Tests can therefore run in
// parallel on one server, create unqualified tables, and never see each other's
// rows or what an earlier run left behind. [PostgresDSN] makes the same schema and
// returns its DSN instead of opening it, for a test that opens several pools on one
// database (as several replicas of a service would) or hands the DSN to a process it
// starts. [PgBouncerDSN] makes one reached through the PgBouncer in transaction
// mode named by REFSET_TEST_PGBOUNCER ([EnvPgBouncer]), for a program that runs behind
// such a pooler.
//
// Without REFSET_TEST_POSTGRES (or, for PgBouncerDSN, REFSET_TEST_PGBOUNCER), each
// skips the test, so a plain go test keeps working on a machine without PostgreSQL;
// when CI=true it fails the test instead, because a suite whose database tests are
// all skipped would pass in CI while testing nothing. A variable that is set but
// names a server that does not answer always fails the test: it was set on purpose.
// The variables are the ones refset's own suite reads, so one setting serves both.
//
// # Query plans
//
// A program's hot paths must cost in proportion to their work, not to its tables, and
// PostgreSQL's plans decide that: a sequential scan planned while a table was small,
// a JIT compilation paid on every call. [PlanGuard] opens a database whose every
// statement, those inside functions and triggers included, auto_explain logs with
// the plan the server ran; [PlanLog.PlansOf] returns the plans of a workload, and
// [AssertPlans] reports the faults whose cost grows with a table named big. Run the
// workload on tables as large as in service, before and after ANALYZE and after they
// grew past their statistics: examples/custody/tokens does so for its payments.
//
// # Processes
//
// A service that runs as several replicas on one database is tested best as several
// processes, each with its own pool, as in service. [Process] starts the test binary
// again in a role the package's TestMain names with [Main]; custody's
// TestTwoReplicaProcesses runs two replicas that pay against one PostgreSQL this way.
//
// # Assertions
//
// [AssertClean], [AssertHeldBy] and [AssertGone] check what a [cleanup.Collector]
// reports: that the set has no leaked objects and no dangling references, which
// rows keep an object alive, that an object was collected. Like testify's assert
// package, each reports a failure with tb.Errorf, saying what it found, and returns
// false; the test goes on (stop it with t.FailNow if it cannot). An error of the
// database while asking is a failure too.
package refsettest
