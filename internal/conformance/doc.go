// Package conformance is the test suite every SQL store runs: the same cases, on a
// real database, against store/sqlite and store/postgres alike. A store's test calls
// Run with a Harness that opens a fresh database per test, through internal/testdb's
// backends (OpenOn) and the store's public Open.
package conformance
