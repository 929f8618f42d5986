package refsettest

import (
	"database/sql"
	"testing"

	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/store/postgres"
)

// Plan is one statement's plan as the server ran it, logged by auto_explain: the
// statement's text, its plan tree (read it with Nodes) and, when the executor
// JIT-compiled it, the JIT section.
type Plan = pgtest.Plan

// PlanNode is one node of a [Plan]'s tree: what it does ("Index Scan", "LockRows"),
// the table it reads or writes, and the rows it returned over all its loops.
type PlanNode = pgtest.PlanNode

// PlanLog collects the plans of a [PlanGuard]'s database. PlansOf(tb, workload) runs
// workload and returns the plans it logged, failing tb when there are none (a guard
// that saw no plan checked nothing); Unparsed returns the messages that looked like
// plans but did not parse, which a test should find empty.
type PlanLog = pgtest.PlanLog

// PlanGuard is what a test of a program's query plans needs, on a schema of its own
// made as [PostgresDSN] makes one: db, a database of store/postgres on one session
// whose every statement, nested ones included (a function's, a trigger's, a foreign
// key's check), auto_explain logs to log with the plan the server ran, the rows and
// pages each node read (ANALYZE and BUFFERS, without timing) and the JIT section; and
// plain, a lib/pq pool on the same schema for the test's own statements (loading
// tables, ANALYZE), whose plans would be noise. All close when tb ends. The session
// stops logging with `SET auto_explain.log_min_duration = -1` and starts again with
// `= 0` (a bulk load through db logs every row's statements otherwise).
//
// The database is one session, as a long-lived service's connection is, so that the
// plans one phase of a test caches (a prepared statement's, a function's) meet the
// next; a workload that holds the connection while it asks for another (a read on db
// outside a unit of work it has open on db) waits for itself.
//
// Loading auto_explain takes a superuser, as the role of [EnvPostgres] is on a
// throwaway server. Without the variable PlanGuard skips tb, or fails it when CI=true.
//
// What a plan should not do depends on the tables: [AssertPlans] checks the faults
// whose cost grows with a big table rather than with the work.
//
//	log, db, plain := refsettest.PlanGuard(t)
//	// ... create and fill the tables through plain, as large as in service ...
//	plans := log.PlansOf(t, func() { balance(ctx, db, "whale") })
//	refsettest.AssertPlans(t, "balance", plans, "tokens", "token_owners")
func PlanGuard(tb testing.TB) (log *PlanLog, db *postgres.DB, plain *sql.DB) {
	tb.Helper()
	log, explained, plain := pgtest.PlanGuard(tb, PostgresDSN(tb))
	ctx, cancel := setupContext(tb)
	defer cancel()
	db, err := postgres.New(ctx, explained, postgres.Options{})
	if err != nil {
		tb.Fatalf("refsettest: open the explained session (auto_explain needs a superuser): %v", err)
	}
	tb.Cleanup(func() { _ = db.Close() })
	return log, db, plain
}

// AssertPlans checks plans, the plans of a hot path on tables as large as in service,
// and reports each fault it finds with tb.Errorf, prefixed with phase: a statement the
// executor JIT-compiled (which it does again on every call: milliseconds each); on a
// table named in big, a sequential scan (but one a Limit stops, which reads no more
// rows than it returns), an index read from end to end, a scan that discarded more
// than 10,000 rows over its loops, or one that read many more pages than its rows and
// loops need. Each costs in proportion to the table, not to the work. No plans at all
// is a failure too: a guard that saw nothing checked nothing. It returns whether it
// found no fault.
//
// big names tables as SQL does: a bare name folds to lower case (Tokens is tokens), a
// "quoted" one keeps its case, "ledger.tokens" is that schema's table only, and a
// partition of a partitioned table named big is big too (with plans from
// [PlanLog.PlansOf], which asks the catalog). A name that is not a table's name
// fails, and so does one that no plan reads and that names no table of the database
// either (a misspelt name would otherwise pass, having checked nothing); the failure
// lists the tables the plans read. A big table that this workload does not read is no
// failure, so one list of a program's big tables serves all its workloads.
func AssertPlans(tb testing.TB, phase string, plans []Plan, big ...string) bool {
	tb.Helper()
	if len(plans) == 0 {
		tb.Errorf("%s: no plans to check", phase)
		return false
	}
	tables := make(map[string]bool, len(big))
	for _, t := range big {
		tables[t] = true
	}
	return pgtest.ReportFaults(tb, phase, plans, tables)
}
