package pgtest

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// openPooled opens dsn, a DSN through PgBouncer, with lib/pq's binary_parameters:
// without it lib/pq parses a statement with arguments in one round trip and runs it
// in another, and PgBouncer may lend the second to another server connection.
func openPooled(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	return open(t, dsn+"&binary_parameters=yes")
}

// TestPooledSchemaIsIsolated checks that a pooled test's tables land in its own
// schema, through every server connection PgBouncer lends the test: many clients
// create and fill tables at once, and each table is in the schema.
func TestPooledSchemaIsIsolated(t *testing.T) {
	dsn, schema := NewPooled(t)
	db := openPooled(t, dsn)
	db.SetMaxOpenConns(8)
	require.Equal(t, []string{"x"}, useTable(t, db, "x"))

	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			_, err := db.ExecContext(t.Context(), `CREATE TABLE t`+string(rune('a'+i))+` (v text)`)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	var elsewhere int
	admin := open(t, baseDSN(t))
	require.NoError(t, admin.QueryRowContext(t.Context(),
		`SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		 WHERE c.relname IN ('t', 'ta', 'tb', 'tc', 'td', 'te', 'tf', 'tg', 'th') AND n.nspname = $1`, schema).Scan(&elsewhere))
	require.Equal(t, 9, elsewhere, "every table is in the test's schema")
}

// TestPooledIsTransactionPooling checks that the DSN goes through a pooler in
// transaction mode, where session state does not survive: two client connections,
// one after the other, are served by the same server connection (the test's role
// has a pool of its own, and a server connection goes back to it when a transaction
// ends). Through a session pooler, or straight to the server, they would not be.
func TestPooledIsTransactionPooling(t *testing.T) {
	dsn, _ := NewPooled(t)
	db := openPooled(t, dsn)
	ctx := t.Context()
	backend := func() int {
		c, err := db.Conn(ctx)
		require.NoError(t, err)
		defer c.Close()
		var pid int
		require.NoError(t, c.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
		return pid
	}
	first, err := db.Conn(ctx) // held open, as a session pooler would hold its server
	require.NoError(t, err)
	defer first.Close()
	var pid int
	require.NoError(t, first.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	require.Equal(t, pid, backend(), "a second client gets the server connection the first one's transaction ended on")
}

// TestPooledCleanupDropsSchema checks that the schema is gone once the test that
// created it has finished, and its role is not, yet: PgBouncer may still log in as
// it to pass on a cancel request.
func TestPooledCleanupDropsSchema(t *testing.T) {
	admin := open(t, baseDSN(t))
	var name string
	if !t.Run("inner", func(t *testing.T) {
		var dsn string
		dsn, name = NewPooled(t)
		useTable(t, openPooled(t, dsn), "v")
	}) {
		t.FailNow()
	}
	var schemas, roles int
	require.NoError(t, admin.QueryRowContext(t.Context(), `SELECT
		(SELECT count(*) FROM pg_namespace WHERE nspname = $1),
		(SELECT count(*) FROM pg_roles WHERE rolname = $1)`, name).Scan(&schemas, &roles))
	require.Zero(t, schemas, "schema %s is still there", name)
	require.Equal(t, 1, roles, "role %s went with its schema", name)
}

// TestSweepDropsEndedTestsRoles checks that a sweep drops the role of an ended test
// (its schema gone, no session left), and leaves a running test's role and a role
// that still has a session, and a role a running test created for itself.
func TestSweepDropsEndedTestsRoles(t *testing.T) {
	ctx := t.Context()
	admin := open(t, baseDSN(t))
	exists := func(role string) bool {
		t.Helper()
		var n int
		require.NoError(t, admin.QueryRowContext(ctx, `SELECT count(*) FROM pg_roles WHERE rolname = $1`, role).Scan(&n))
		return n == 1
	}
	running, ended, connected := schemaPrefix+randomHex(pooledRoleBytes), schemaPrefix+randomHex(pooledRoleBytes), schemaPrefix+randomHex(pooledRoleBytes)
	// A role a running test made for itself, named after its schema, has no
	// schema of its name and no session until the test logs in as it.
	testsOwn := running + "_writer"
	require.NoError(t, createRole(ctx, admin, schemaPrefix, running))
	t.Cleanup(func() { dropOwned(t, admin, running) })
	for _, role := range []string{ended, connected, testsOwn} {
		_, err := admin.ExecContext(ctx, `CREATE ROLE `+pq.QuoteIdentifier(role)+` LOGIN`)
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		_, err := admin.ExecContext(context.Background(), `DROP ROLE IF EXISTS `+pq.QuoteIdentifier(testsOwn))
		assert.NoError(t, err)
	})
	asConnected, err := asUser(baseDSN(t), connected)
	require.NoError(t, err)
	session := open(t, asConnected)
	require.NoError(t, session.PingContext(ctx), "a session of %s", connected)

	sweepRoles(ctx, admin, schemaPrefix)
	assert.True(t, exists(running), "the running test's role was dropped")
	assert.False(t, exists(ended), "the ended test's role is still there")
	assert.True(t, exists(connected), "the role with a session was dropped")
	assert.True(t, exists(testsOwn), "a role a running test made for itself was dropped")

	require.NoError(t, session.Close())
	require.Eventually(t, func() bool { sweepRoles(ctx, admin, schemaPrefix); return !exists(connected) }, 10*time.Second, 50*time.Millisecond,
		"a later sweep drops the role once its session is gone")
}

// TestAsUser needs no server: it checks the DSN rewriting, and that lib/pq reads
// the result back as the role, without a password.
func TestAsUser(t *testing.T) {
	const role = "refset_t_0123456789ab"
	tests := []rewriteCase{
		{"url", "postgres://postgres@127.0.0.1:6432/db?sslmode=disable",
			"postgres://" + role + "@127.0.0.1:6432/db?sslmode=disable"},
		{"url with password", "postgres://postgres:secret@127.0.0.1:6432/db",
			"postgres://" + role + "@127.0.0.1:6432/db"},
		{"key=value", "host=127.0.0.1 port=6432 user=postgres password=secret dbname=db",
			"host=127.0.0.1 port=6432 user=postgres password=secret dbname=db user='" + role + "' password=''"},
	}
	requireRewrites(t, func(dsn string) (string, error) { return asUser(dsn, role) }, tests, func(t *testing.T, cfg pq.Config) {
		require.Equal(t, role, cfg.User)
		require.Empty(t, cfg.Password)
	})
}

// TestMissingBouncer checks that a pooled test without PgBouncer skips, and fails
// under CI, where a skipped pooled suite would pass while testing nothing.
func TestMissingBouncer(t *testing.T) {
	baseDSN(t) // the server must be there: only the bouncer is missing
	for _, tc := range []struct {
		name, ci string
		wantSkip bool
	}{
		{"outside CI skips", "", true},
		{"under CI fails", "true", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			t.Setenv(EnvPgBouncer, "")
			requireGivesUp(t, func(tb testing.TB) { NewPooled(tb) }, tc.wantSkip, EnvPgBouncer+" is not set")
		})
	}
}
