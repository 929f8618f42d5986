// Package refsettest helps the tests of programs that use refset: a throwaway
// PostgreSQL database, a guard on its query plans, and assertions about what clean-up
// sees. A throwaway SQLite database is in the sub-package refsettest/sqlitetest, so
// that this package does not import store/sqlite: the tests of a program that uses
// PostgreSQL only link no SQLite, and a program that uses SQLite keeps its own choice
// of driver (store/sqlite/modernc or store/sqlite/mattn), which sqlitetest uses.
//
// # Databases
//
// sqlitetest.Open opens a database file in the test's temporary directory and
// closes it when the test ends. [Postgres] creates a schema of its own for the test on the
// server named by the REFSET_TEST_POSTGRES environment variable ([EnvPostgres]),
// opens the database with every connection's search_path set to that schema only,
// and drops the schema (CASCADE) when the test ends. Tests can therefore run in
// parallel on one server, create unqualified tables, and never see each other's
// rows or what an earlier run left behind. A transaction the test left open on its
// schema would keep it from being dropped: the session that holds it is terminated,
// the test fails naming it (its pid, application, state and last query), and the
// schema is dropped all the same. [PostgresDSN] makes the same schema and
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
// names a server (or a PgBouncer) that does not answer always fails the test: it
// was set on purpose.
// The variables are the ones refset's own suite reads, so one setting serves both.
//
// # Query plans
//
// A program's hot paths must cost in proportion to their work, not to its tables, and
// PostgreSQL's plans decide that: a sequential scan planned while a table was small,
// a JIT compilation paid on every call. [PlanGuard] opens a database whose every
// statement, those inside functions and triggers included, auto_explain logs with
// the plan the server ran; [PlanLog.PlansOf] returns the plans of a workload, and
// [AssertPlans] reports the faults whose cost grows with a table named big, named as
// SQL names it: Tokens is tokens, "Tokens" keeps its case, a schema may qualify it,
// and a partition counts as its partitioned table; a name that names no table fails,
// rather than pass having checked nothing. Run the
// workload on tables as large as in service, before and after ANALYZE and after they
// grew past their statistics: examples/custody/tokens does so for its payments.
//
// # Processes
//
// A service that runs as several replicas on one database is tested best as several
// processes, each with its own pool, as in service. [Process] starts the test binary
// again in a role the package's TestMain names with [Main]; custody's
// TestTwoReplicaProcesses runs two replicas that pay against one PostgreSQL this way.
// A TestMain that does not call Main fails the process, which exits 2 saying so,
// rather than pass having run nothing.
//
// # Lost connections
//
// What a program does when its connection is lost around a COMMIT decides whether a
// payment runs twice or not at all. [PostgresProxy] puts a [Proxy] between a test and
// its server that, when armed, loses one connection at the worst moment: its client
// cut off as a COMMIT or a chosen statement goes on to the server, or the server's
// answer to it dropped. Either way the statement runs on the server and its client
// hears only the loss; the test then checks what its code returned
// (refset.ErrUnavailable, refset.ErrCommitUnknown) against what the database holds.
// examples/custody/tokens loses a payment's connection this way.
//
// A server can also hang: keep its connections open and answer nothing. A call that
// waits on it for ever holds its caller (a request, a payment, a node's loop) for
// ever. [PostgresFreezer] puts a [Freezer] between a test and its server, which
// hangs when told, or just before a COMMIT reaches the server; the test then checks
// that its code gives up within its deadline, and that what it returned agrees with
// what the database holds once the freezer thaws. examples/custody/tokens pays on a
// hung server this way.
//
// # Assertions
//
// [AssertClean], [AssertHeldBy] and [AssertGone] check what a [cleanup.Collector]
// reports: that the set has no leaked objects and no dangling references, which
// rows keep an object alive, that an object was collected. Like testify's assert
// package, each reports a failure with tb.Errorf, saying what it found, and returns
// false; the test goes on (stop it with t.FailNow if it cannot). An error of the
// database while asking is a failure too. They work in a t.Cleanup as in the test's
// body (tb.Context() is cancelled by then: they ask with its values, under a
// timeout of their own), and so do the fixtures.
package refsettest
