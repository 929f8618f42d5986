// Package pgtest gives each test its own throwaway PostgreSQL schema.
//
// Tests that need PostgreSQL call [DSN] (or [New] when they also want the
// schema name). The helper reads the server address from the
// REFSET_TEST_POSTGRES environment variable, which scripts/test.sh (and so
// `make test`) sets after starting a disposable cluster. Developers can also
// point it at a server of their own:
//
//	REFSET_TEST_POSTGRES='postgres://user@127.0.0.1:5432/db?sslmode=disable' go test ./...
//
// Each call creates a uniquely named schema (refset_t_<random hex>) and
// returns a DSN whose search_path is that schema only, so every connection
// opened from it creates and reads unqualified tables inside the schema.
// Tests can therefore run in parallel against one database without seeing
// each other's tables, and no test depends on what an earlier one left
// behind. The schema is dropped with CASCADE when the test ends; a transaction
// the test left open there, which the drop would wait for, is terminated first
// and fails the test, naming the session.
//
// Without REFSET_TEST_POSTGRES the tests are skipped, so a plain `go test`
// keeps working on machines without PostgreSQL; under CI (CI=true) that
// is a failure instead, because a skipped database suite would otherwise
// pass silently. A DSN that is set but does not answer is always a failure.
//
// Tests of reads from a hot standby call [NewWithStandby], which also returns the
// schema's DSN on the standby named by REFSET_TEST_POSTGRES_STANDBY (scripts/test.sh
// starts one, streaming from its cluster) once the standby has replayed the schema,
// and [PauseReplay] to hold the standby still while the primary moves on. Without
// the variable they skip, or fail under CI, as above.
//
// Cleanups run in reverse order of registration, so a test that opens a
// *sql.DB after calling DSN and registers its Close with t.Cleanup has its
// connections closed before the schema is dropped.
//
// [NewPooled] gives the same through PgBouncer in transaction mode
// (REFSET_TEST_PGBOUNCER, which scripts/test.sh sets when it starts one in
// front of its throwaway cluster): the tests that must survive transaction
// pooling log in as a role of their own, whose search_path is the schema,
// since no DSN parameter or SET can carry it through such a pooler.
//
// Servers that fail on cue: a [Proxy] loses a connection at the worst moment (its
// client cut as a COMMIT or a chosen statement goes on, or the server's answer
// dropped); a [Freezer] hangs, holding every connection open and passing nothing on
// (FreezeAtCommit: just before a COMMIT reaches the server) until it thaws; a
// [SilentServer] accepts connections and never answers them.
//
// The plan guards (store/postgres's TestHotPathPlansOnLargeData, blockmanager's
// TestPlansOnLargeData, console's TestPlans) run a path on an [ExplainedPool], whose
// sessions log every statement's plan, nested ones included, through auto_explain,
// and check them with [PlanFaults]: no JIT, no sequential scan of a big table but one
// a Limit stops, no index of one read from end to end, no scan that reads and
// discards thousands of its rows.
package pgtest
