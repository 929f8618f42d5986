// Package bench measures what refset costs over raw sqlx doing the same SQL on the
// same database in the same run. It has only benchmarks; scripts/bench.sh runs them
// all and prints one table of the speed targets (internal/cmd/benchtable),
// and BENCHMARKS.md at the repository root records the results.
//
// Each benchmark runs once per database: SQLite (a file in a temporary directory,
// sqlite.Options{} defaults, so synchronous=FULL in WAL mode, as users get it), and
// PostgreSQL (a fresh schema from internal/test/pgtest; skipped unless
// REFSET_TEST_POSTGRES is set) once through each driver, lib/pq under the name
// "postgres" (the name its figures had before pgx was measured) and pgx's stdlib
// driver under "pgx". On PostgreSQL the benchmark opens a pool of its own with the
// driver, as a user would, and hands it to refset with postgres.New, so the raw side
// always runs on the same driver as refset. Within a database both sides share one
// pool, so names read like BenchmarkAdd/sqlite/refset and BenchmarkAdd/sqlite/sqlx
// and benchstat can put the pair side by side. Both sides pass context.Background()
// and the same statement text with the same arguments; everything that is setup
// (rows to read or hand over, tokens) happens before the timer starts.
//
// A third sub-benchmark, paired (BenchmarkAdd/sqlite/paired), runs one operation of
// each side per iteration, taking turns at going first, times each on its own and
// reports refset-ns/op, sqlx-ns/op and throughput-ratio (refset's throughput over
// sqlx's). On a shared or noisy machine the separate sides see different moments and
// their ratio swings by tens of percent; the paired ratio does not. It has a bias of
// its own: garbage-collector work that refset's allocations cause is partly charged to
// whichever side it interrupts, so for CPU-bound operations (a SQLite Get miss) read it
// beside the separate numbers.
//
//   - Add: RefSet.Add of one block, a one-row INSERT in its own transaction, against
//     BEGIN, the store's INSERT, COMMIT on the connection refset writes through
//     (sqlite DB.Writer(), on postgres the pool given to postgres.New). Every
//     iteration inserts a new ID.
//   - GetHit: RefSet.Get while a lease on the object is alive. The database handle is
//     closed before the timer starts, so any database access would fail the
//     benchmark: a hit is measured, not assumed. There is no raw counterpart.
//   - GetMiss: RefSet.Get of an object no lease or earlier Get of that set has
//     touched (every iteration reads an ID the set has never read), the lease then
//     dropped, against the store's SELECT by primary key scanned by sqlx into the
//     struct, on the reader pool (sqlite DB.Readers(), postgres the same pool).
//   - Complete: a two-command hand-over, Release(DELETE FROM pending ...) then
//     Acquire(INSERT INTO heads ...) then Complete, against BEGIN, the same DELETE
//     (checking one row), the same INSERT, COMMIT.
//
// Every benchmark measures analyzed tables, as a service's are once autovacuum has
// run: the core's once each side's setup rows are in (env.settle), the others once
// their data is loaded. Add, GetMiss and Complete also run under grown
// (BenchmarkAdd/sqlite/grown/paired): statistics taken with the genesis block alone,
// then 100,000 blocks stored, autovacuum off on those tables so they stay stale. Put
// starts from analyzed empty tables and grows them itself. With
// REFSET_BENCH_RESOLVE=off the core's Postgres stores do not ask for a commit's
// ticket (postgres.Options.ResolveCommitWait -1), to measure what that costs.
//
// The other files measure what is built on the core, each beside hand-written SQL
// doing the same work: blockmanager_test.go (Put against a raw bulk insert, branch
// walks), cleanup_test.go (collecting garbage, expiring holds) and custody_test.go
// (payments by eight replicas on Postgres, two-step and in one statement, against the
// same payments written with sqlx in custody_sqlx_test.go; wallet sizes, small pools
// and a hot owner against themselves; scripts/custody-bench.sh runs them beside
// pgbench). Custody runs both sides on lib/pq, or on pgx with REFSET_BENCH_DRIVER=pgx,
// keeping its benchmark names. Custody also reports cpu-us/cycle, the whole machine's
// busy CPU time per payment, read from /proc/stat, and, where the server runs on this
// machine, server-cpu-us/cycle and client-cpu-us/cycle, the CPU time of the side's own
// backends and of the benchmark process (custody_cpu_test.go): other work on a shared
// machine counts in the first, not in the others.
//
// replicas_test.go and scale_test.go measure scale rather than overhead (SCALING.md,
// scripts/scale-bench.sh): custody payers and block receivers as 1 to 16 replica
// processes (the test binary started again by TestMain as a replica) on one server,
// and sets of 1,000,000 and 10,000,000 objects. TestRetryCounterCountsDeadlocks, the
// package's one test, checks the deadlock count those benchmarks report.
package bench
