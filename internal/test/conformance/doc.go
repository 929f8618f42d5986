// Package conformance is the test suite every SQL store passes: the same cases, on
// a real database, against store/sqlite and store/postgres alike. It is test code
// only (this file is its one non-test file): three tests, each a suite run on every
// harness (conformance_test.go), a SQLite file and Postgres reached each way a store
// reaches it (lib/pq prepared and unprepared, pgx, with a hot standby, through
// PgBouncer with each driver):
//
//   - TestConformance (run_test.go): sets, tokens, hand-overs, holds, errors,
//     migrations, races, a store on pools the caller opened;
//   - TestCleanupConformance (cleanup_test.go): clean-up and its schedule;
//   - TestPromisesConformance (promises_test.go): refset's one promise against a
//     hostile caller.
//
// Each test opens a fresh database of its own through internal/test/testdb and the
// store's public Open, so the tests run in parallel. Run it on SQLite alone (the
// Postgres harnesses skip without a server, and fail under CI=true) with
//
//	go test ./internal/test/conformance
//
// and on every harness with the throwaway cluster, PgBouncer and standby
// scripts/test.sh starts:
//
//	REFSET_TEST_PACKAGES=./internal/test/conformance bash scripts/test.sh
//
// adding -run 'Conformance/pgx/' (a harness's name) for one harness.
package conformance
