package sqlite

// The conformance suite runs in package sqlite_test and builds its stores with
// NewStore, as users do; its harness also needs the dialects, which users never see.
var (
	TestCleanupDialect = cleanupDialect{}
)
