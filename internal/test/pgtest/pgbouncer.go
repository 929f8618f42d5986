package pgtest

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"regexp"
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
// CI=true. If it is set but no PgBouncer answers there, as the role, NewPooled
// always fails tb.
func NewPooled(tb testing.TB) (dsn, schema string) {
	tb.Helper()
	return NewPooledPrefixed(tb, schemaPrefix)
}

// NewPooledPrefixed is [NewPooled] with a schema (and role) whose name starts with
// prefix, for a fixture of users' tests (refsettest) whose schemas are told apart
// from refset's own.
func NewPooledPrefixed(tb testing.TB, prefix string) (dsn, schema string) {
	tb.Helper()
	base := baseDSN(tb)
	// The pooled suites are how CI knows refset survives transaction pooling:
	// skipping them must not pass.
	bouncer := envDSN(tb, EnvPgBouncer, "run make test (it starts PgBouncer when the pgbouncer package is installed)")

	admin := openAdmin(tb, base, EnvDSN)
	name := prefix + randomHex(pooledRoleBytes)
	ctx, cancel := setupContext(tb)
	defer cancel()
	if err := createRole(ctx, admin, prefix, name); err != nil {
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
	pingBouncer(tb, dsn)
	return dsn, name
}

// pingBouncer fails tb unless the PgBouncer of dsn lets the test's role in and
// reaches the server: a variable set on purpose that names no working PgBouncer is
// a broken setup, which must fail the test here, not later in whatever first
// connects, nor skip it.
func pingBouncer(tb testing.TB, dsn string) {
	tb.Helper()
	db, err := sql.Open("postgres", dsn)
	if err == nil {
		defer db.Close()
		ctx, cancel := setupContext(tb)
		defer cancel()
		err = db.PingContext(ctx)
	}
	if err != nil {
		tb.Fatalf("pgtest: cannot reach the PgBouncer in %s, as the test's role (it must be running, in front of the server in %s, "+
			"and find the server's roles with auth_user and auth_query): %v", EnvPgBouncer, EnvDSN, redact(err))
	}
}

// createRole creates role name, its schema of the same name and its
// search_path, in one transaction: a role of this package without its schema
// is one whose test has ended, which sweepRoles drops. It sweeps the ended
// roles named with prefix first.
func createRole(ctx context.Context, admin *sql.DB, prefix, name string) error {
	sweepRoles(ctx, admin, prefix)
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
//
// A transaction the test left open is ended first, as for [New]'s schema (see
// dropAtEnd): the schema is the role's name.
func dropOwned(tb testing.TB, admin *sql.DB, name string) {
	tb.Helper()
	dropAtEnd(tb, admin, name, "DROP OWNED BY "+pq.QuoteIdentifier(name)+" CASCADE")
}

// pooledRole matches the names NewPooledPrefixed gives its roles with prefix, and
// only those: a test may create roles of its own named after its schema
// (schema+"_writer"), and the sweep must never take one of those from under it.
func pooledRole(prefix string) string {
	return "^" + regexp.QuoteMeta(prefix) + "[0-9a-f]{" + strconv.Itoa(2*pooledRoleBytes) + "}$"
}

// pooledRoleBytes is how many random bytes a pooled role's name carries.
const pooledRoleBytes = 6

// sweepRoles drops the roles of ended tests (NewPooledPrefixed's roles named with
// prefix, without their schema) that no session uses any more: PgBouncer has
// closed its idle server connections for them (server_idle_timeout), so no cancel
// request is on its way. It is best effort: a role it cannot drop now (another
// sweep's, or in use again) is dropped by a later sweep, and roles left over when
// the server goes (scripts/test.sh deletes its cluster) cost nothing.
func sweepRoles(ctx context.Context, admin *sql.DB, prefix string) {
	rows, err := admin.QueryContext(ctx, `SELECT rolname FROM pg_roles
		WHERE rolname ~ $1
		AND NOT EXISTS (SELECT FROM pg_namespace WHERE nspname = rolname)
		AND NOT EXISTS (SELECT FROM pg_stat_activity WHERE usename = rolname)`, pooledRole(prefix))
	if err != nil {
		return
	}
	var ended []string
	for rows.Next() {
		var r string
		if rows.Scan(&r) == nil {
			ended = append(ended, r)
		}
	}
	_ = rows.Close()
	for _, r := range ended {
		_, _ = admin.ExecContext(ctx, "DROP ROLE IF EXISTS "+pq.QuoteIdentifier(r))
	}
}

// asUser returns dsn with its user replaced by user and no password (PgBouncer
// trusts the roles it looks up).
func asUser(dsn, user string) (string, error) {
	return rewrite(dsn, EnvPgBouncer, func(u *url.URL) { u.User = url.User(user) }, "user="+quote(user)+" password=''")
}
