package postgres

// The conformance suite runs in package postgres_test and builds its stores with
// NewStore, as users do; its harness also needs the dialects, which users never see.
var (
	TestCleanupDialect = cleanupDialect{}
)
