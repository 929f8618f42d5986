package postgres

// The SQLSTATE codes refset reads, by their names in the PostgreSQL manual
// (Appendix A). Every code this store looks at is named here, and only here.
const (
	codeUniqueViolation           = "23505"
	codeForeignKeyViolation       = "23503"
	codeSerializationFailure      = "40001"
	codeDeadlockDetected          = "40P01"
	codeLockNotAvailable          = "55P03" // lock_timeout, NOWAIT
	codeIdleInTransactionTimeout  = "25P03"
	codeIdleSessionTimeout        = "57P05"
	codeQueryCanceled             = "57014" // statement_timeout, or a cancel request
	codeAdminShutdown             = "57P01" // also pg_terminate_backend
	codeCrashShutdown             = "57P02"
	codeCannotConnectNow          = "57P03" // starting up, shutting down
	codeDatabaseDropped           = "57P04"
	codeInFailedSQLTransaction    = "25P02"
	codeReadOnlySQLTransaction    = "25006" // a write on a standby, or a fenced (read-only) primary
	codeUndefinedTable            = "42P01"
	codeUndefinedColumn           = "42703"
	codeUndefinedObject           = "42704"
	codeUndefinedFunction         = "42883"
	codeInvalidSchemaName         = "3F000"
	codeInsufficientPrivilege     = "42501"
	codeFeatureNotSupported       = "0A000" // also a prepared statement whose result type a migration changed
	codeProtocolViolation         = "08P01" // also a statement bound with another number of arguments than it has
	codeInvalidTextRepresentation = "22P02" // also a row count refused by rowCheckedSQL
	codeInvalidSQLStatementName   = "26000" // no such prepared statement
)

// SQLSTATE classes: the first two characters of a code.
const (
	classIntegrityConstraint  = "23"
	classConnectionException  = "08"
	classInsufficientResource = "53"
	classSystemError          = "58"
	classInvalidAuthorization = "28"
	classInvalidCatalogName   = "3D" // no such database
)
