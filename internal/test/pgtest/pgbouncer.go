package pgtest

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strconv"
	"testing"

	"github.com/lib/pq"
)

// EnvPgBouncer names the environment variable holding the lib/pq DSN of a
// PgBouncer in transaction mode (pool_mode = transaction) in front of the
// REFSET_TEST_POSTGRES server, as scripts/test.sh starts one. PgBouncer must
// find roles in the server (auth_user), since each pooled test logs in as a
// role of its own.
const EnvPgBouncer = "REFSET_TEST_PGBOUNCER"

// NewPooled is [New] through the PgBouncer named by REFSET_TEST_PGBOUNCER:
// it creates a uniquely named schema and a role of the same name that owns
// it, and returns a DSN that logs in as that role through PgBouncer, with the
// schema's name. The schema, and all the role owns, is dropped when tb ends;
// the role itself later (see [sweepRoles]).
//
// A DSN cannot carry the schema here as [New]'s does: PgBouncer 1.18 refuses
// a search_path startup parameter (and would not restore it on the server
// connection it lends each transaction), and a SET would stay on whichever
// server connection ran it. The role's own setting (ALTER ROLE ... SET
// search_path) is applied by the server to every session the role opens, so
// every server connection PgBouncer lends the test uses the schema. PgBouncer
// pools server connections per role, so tests do not share them either.
//
// The role owns its schema and nothing else: it can create and drop what the
// tests create there, but not roles, databases or other schemas.
//
// If REFSET_TEST_PGBOUNCER (or REFSET_TEST_POSTGRES, which the schema and
// role are created through) is not set, NewPooled skips tb, or fails it when
// CI=true.
func NewPooled(tb testing.TB) (dsn, schema string) {
	tb.Helper()
	base := baseDSN(tb)
	// The pooled suites are how CI knows refset survives transaction pooling:
	// skipping them must not pass.
	bouncer := envDSN(tb, EnvPgBouncer, "run make test (it starts PgBouncer when the pgbouncer package is installed)")

	admin := openAdmin(tb, base, EnvDSN)
	name := schemaPrefix + randomHex(pooledRoleBytes)
	if err := createRole(tb.Context(), admin, name); err != nil {
		_ = admin.Close()
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(func() {
		defer admin.Close()
		dropOwned(tb, admin, name)
	})

	dsn, err := asUser(bouncer, name)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	return dsn, name
}

// createRole creates role name, its schema of the same name and its
// search_path, in one transaction: a role of this package without its schema
// is one whose test has ended, which sweepRoles drops. It sweeps first.
func createRole(ctx context.Context, admin *sql.DB, name string) error {
	sweepRoles(ctx, admin)
	tx, err := admin.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	role := pq.QuoteIdentifier(name)
	for _, stmt := range []string{
		"CREATE ROLE " + role + " LOGIN",
		"CREATE SCHEMA " + role + " AUTHORIZATION " + role,
		"ALTER ROLE " + role + " SET search_path TO " + role,
	} {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	return tx.Commit()
}

// dropOwned drops all that role name owns: its schema, and whatever the test
// created there. The role stays, for a while: PgBouncer may still have to log
// in as it. A client that closes a connection in the middle of a statement
// (pgx does, when a context ends) sends PgBouncer a cancel request as it goes,
// and PgBouncer opens a server connection as the client's role to pass it on.
// Were the role gone, that login would fail, the cancel request would hang, and
// PgBouncer 1.18 crashes when its client then gives up (pgbouncer#801).
func dropOwned(tb testing.TB, admin *sql.DB, name string) {
	tb.Helper()
	// Not tb.Context(): it is already canceled when cleanups run.
	ctx, cancel := context.WithTimeout(context.Background(), dropTimeout)
	defer cancel()
	stmt := "DROP OWNED BY " + pq.QuoteIdentifier(name) + " CASCADE"
	if err := dropRetrying(ctx, admin, stmt); err != nil {
		tb.Errorf("pgtest: %s (is a transaction of the test still open?): %v", stmt, err)
	}
}

// pooledRole matches the names NewPooled gives its roles, and only those: a test
// may create roles of its own named after its schema (schema+"_writer"), and the
// sweep must never take one of those from under it.
var pooledRole = "^" + schemaPrefix + "[0-9a-f]{" + strconv.Itoa(2*pooledRoleBytes) + "}$"

// pooledRoleBytes is how many random bytes a pooled role's name carries.
const pooledRoleBytes = 6

// sweepRoles drops the roles of ended tests (NewPooled's roles without their
// schema) that no session uses any more: PgBouncer has closed its idle server
// connections for them (server_idle_timeout), so no cancel request is on its
// way. It is best effort: a role it cannot drop now is dropped by a later sweep,
// and roles left over when the server goes (scripts/test.sh deletes its cluster)
// cost nothing.
func sweepRoles(ctx context.Context, admin *sql.DB) {
	_, _ = admin.ExecContext(ctx, `DO $$
DECLARE r name;
BEGIN
	FOR r IN SELECT rolname FROM pg_roles
		WHERE rolname ~ '`+pooledRole+`'
		AND NOT EXISTS (SELECT FROM pg_namespace WHERE nspname = rolname)
		AND NOT EXISTS (SELECT FROM pg_stat_activity WHERE usename = rolname)
	LOOP
		BEGIN
			EXECUTE format('DROP ROLE IF EXISTS %I', r);
		EXCEPTION WHEN OTHERS THEN
			NULL; -- another sweep's, or still in use: a later sweep's
		END;
	END LOOP;
END $$`)
}

// asUser returns dsn with its user replaced by user and no password (PgBouncer
// trusts the roles it looks up).
func asUser(dsn, user string) (string, error) {
	return rewrite(dsn, EnvPgBouncer, func(u *url.URL) { u.User = url.User(user) }, "user="+quote(user)+" password=''")
}
