package refsettest

import (
	"os"
	"testing"

	"github.com/refsetdb/refset/internal/test/pgtest"
)

// EnvPgBouncer names the environment variable holding the DSN of a PgBouncer in
// transaction mode (pool_mode = transaction) in front of the [EnvPostgres] server,
// which [PgBouncerDSN] reaches its schemas through. PgBouncer must find the server's
// roles itself (auth_user and auth_query), since each schema is reached as a role of
// its own.
const EnvPgBouncer = pgtest.EnvPgBouncer

// PgBouncerDSN creates a schema for tb alone on the server named by [EnvPostgres], as
// [PostgresDSN] does, and returns a DSN that reaches it through the PgBouncer named by
// [EnvPgBouncer], for a test of a program that runs behind a pooler in transaction
// mode (open it with postgres.Options{Unprepared: true}, as the program would be).
// The schema is named with [SchemaPrefix]. When tb ends the schema is dropped with
// everything in it: close what the test opened on it first, as with PostgresDSN (a
// transaction left open is ended, and fails tb, as there).
//
// The schema cannot be named in the DSN as PostgresDSN's is: PgBouncer 1.18 refuses a
// search_path startup parameter, and a SET would stay on whichever server connection
// ran it. So PgBouncerDSN also creates a role that owns the schema and has it as its
// search_path (which the server applies to every session the role opens), and the DSN
// logs in as that role, without a password: the role in EnvPostgres must be allowed
// to create roles. PgBouncer pools server connections per role, so tests share none.
//
// Without either variable PgBouncerDSN skips tb, or fails it when CI=true. With
// them, it connects through the PgBouncer as the test's role before it returns, and
// fails tb, saying so, when no PgBouncer answers there or it cannot reach the server.
func PgBouncerDSN(tb testing.TB) string {
	tb.Helper()
	if os.Getenv(EnvPgBouncer) == "" {
		pgtest.GiveUp(tb, "refsettest: "+EnvPgBouncer+" is not set; set it to the DSN of a PgBouncer in transaction mode in front of the server in "+EnvPostgres)
	}
	needServer(tb)
	dsn, _ := pgtest.NewPooledPrefixed(tb, SchemaPrefix)
	return dsn
}
