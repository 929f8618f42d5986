package refsettest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/store/postgres"
)

// EnvPostgres names the environment variable holding the DSN (a URL or key=value
// connection string that lib/pq and pgx both read) of the server [Postgres] creates
// its schemas on. The role must be allowed to create schemas in that database.
const EnvPostgres = "REFSET_TEST_POSTGRES"

// SchemaPrefix starts the name of every schema [Postgres], [PostgresDSN] and
// [PgBouncerDSN] create (and of the role PgBouncerDSN creates with its schema), so
// leftovers of a test binary that was killed before its cleanups ran are easy to
// find and drop.
const SchemaPrefix = "refsettest_"

// connectTimeout bounds the first contact with the server: a DSN that does not
// answer fails the test quickly instead of hanging the suite.
const connectTimeout = 10 * time.Second

// Postgres creates a schema for tb alone on the server named by [EnvPostgres]
// ([PostgresDSN]), opens it with opts (through opts.Driver: lib/pq or pgx) and every
// connection's search_path set to that schema, so unqualified tables the test
// creates, refset's own included, land there. When tb ends the database is closed and
// the schema dropped with everything in it; a transaction the test left open is
// ended first, and fails tb (see [PostgresDSN]).
//
// Without the variable Postgres skips tb, or fails it when CI=true (see the package
// documentation). With it, a server that cannot be reached or refuses to create the
// schema fails tb.
func Postgres(tb testing.TB, opts postgres.Options) *postgres.DB {
	tb.Helper()
	dsn := PostgresDSN(tb)
	ctx, cancel := setupContext(tb)
	defer cancel()
	db, err := postgres.Open(ctx, dsn, opts)
	if err != nil {
		tb.Fatalf("refsettest: open the test's schema: %v", err)
	}
	// Registered after the drop, so it runs before it: cleanups run last first.
	tb.Cleanup(func() {
		if err := db.Close(); err != nil {
			tb.Errorf("refsettest: close the Postgres database: %v", err)
		}
	})
	return db
}

// PostgresDSN creates a schema for tb alone on the server named by [EnvPostgres], as
// [Postgres] does, and returns the DSN of that schema (the server's, with the
// search_path set to it) instead of opening it, for a test that opens several pools
// on one database, as several processes of a program would, or passes the DSN to a
// process it starts. When tb ends the schema is dropped with everything in it:
// close what the test opened on it first, with a cleanup registered after this call
// (cleanups run last first). A pool left open does no harm, but a transaction left
// open (or a statement left running) holds locks the drop would wait for: the
// cleanup gives such sessions two seconds to end, then terminates them and fails tb
// naming each (its pid, application_name, state and last query, so the test's author
// finds the leak), and drops the schema all the same. Terminating another role's
// session takes the role of [EnvPostgres] to be a superuser (or, for sessions that
// are not a superuser's, a member of pg_signal_backend); when it may not, tb fails
// saying so, and the drop waits for the session, at most 30 seconds.
//
// Without the variable PostgresDSN skips tb, or fails it when CI=true.
func PostgresDSN(tb testing.TB) string {
	tb.Helper()
	needServer(tb)
	dsn, _ := pgtest.NewPrefixed(tb, SchemaPrefix)
	return dsn
}

// setupContext is what a fixture sets up its database with: tb's context, but not
// cancelled with it, since a test may open a database from a t.Cleanup (tb.Context()
// is cancelled before cleanups run); connectTimeout bounds it instead.
func setupContext(tb testing.TB) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(tb.Context()), connectTimeout)
}

// needServer skips tb, or fails it in CI, when EnvPostgres is not set, saying so in
// refsettest's words.
func needServer(tb testing.TB) {
	tb.Helper()
	if os.Getenv(EnvPostgres) == "" {
		pgtest.GiveUp(tb, "refsettest: "+EnvPostgres+" is not set; set it to the DSN of a PostgreSQL server where the role may create schemas")
	}
}
