package sqlite_test

import (
	"testing"

	"github.com/refsetdb/refset/internal/conformance"
	"github.com/refsetdb/refset/internal/testdb"
)

// harness opens each test's database as a file in its own temporary directory, with
// the public Open, as users do.
var harness = conformance.Harness{
	Open:   conformance.OpenOn(testdb.SQLite, testdb.Options{}),
	Reopen: conformance.ReopenOn(testdb.Options{}),
	Types:  conformance.Types{Text: "TEXT", Int: "INTEGER", Bytes: "BLOB", Time: "TIMESTAMP", Bool: "BOOLEAN", Float: "REAL"},
}

func TestConformance(t *testing.T) {
	conformance.Run(t, harness)
}

func TestCleanupConformance(t *testing.T) {
	conformance.RunCleanup(t, harness)
}

func TestPromisesConformance(t *testing.T) {
	conformance.RunPromises(t, harness)
}
