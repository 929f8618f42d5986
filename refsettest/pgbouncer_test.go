package refsettest_test

import (
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/refsetdb/refset/refsettest"
	"github.com/refsetdb/refset/store/postgres"
)

// TestPgBouncerDSN checks that the DSN reaches, through the PgBouncer, a schema of the
// test's own that pools of both drivers share, unprepared as behind a pooler, and
// that two tests' schemas are apart.
func TestPgBouncerDSN(t *testing.T) {
	var dsns []string
	var schemas []string
	for range 2 {
		dsn := refsettest.PgBouncerDSN(t)
		dsns = append(dsns, dsn)
		var dbs []*postgres.DB
		for _, driver := range []string{postgres.DriverLibPQ, postgres.DriverPgx} {
			db, err := postgres.Open(t.Context(), dsn, postgres.Options{Driver: driver, Unprepared: true})
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() }) // before the drop
			dbs = append(dbs, db)
		}
		var schema string
		require.NoError(t, dbs[0].Pool().GetContext(t.Context(), &schema, `SELECT current_schema()`))
		require.True(t, strings.HasPrefix(schema, refsettest.SchemaPrefix), "schema %s", schema)
		schemas = append(schemas, schema)
		exec(t, dbs[0], `CREATE TABLE t (id TEXT PRIMARY KEY)`)
		exec(t, dbs[0], `INSERT INTO t (id) VALUES ('`+schema+`')`)
		var rows []string
		require.NoError(t, dbs[1].Pool().SelectContext(t.Context(), &rows, `SELECT id FROM t`))
		require.Equal(t, []string{schema}, rows, "the other pool sees the same schema, and only it")
	}
	require.NotEqual(t, schemas[0], schemas[1])
	bouncer, err := url.Parse(os.Getenv(refsettest.EnvPgBouncer))
	require.NoError(t, err)
	for _, dsn := range dsns {
		u, err := url.Parse(dsn)
		require.NoError(t, err)
		require.Equal(t, bouncer.Host, u.Host, "through the PgBouncer")
	}
}

// TestPgBouncerDSNWithoutPooler: without the variable PgBouncerDSN skips, or fails
// under CI. It sets environment variables, so it cannot run in parallel.
func TestPgBouncerDSNWithoutPooler(t *testing.T) {
	for _, tc := range []struct {
		name, ci string
		wantSkip bool
	}{
		{"unset skips", "", true},
		{"unset under CI fails", "true", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			t.Setenv(refsettest.EnvPgBouncer, "")
			rec, returned := run(t, func(tb testing.TB) { refsettest.PgBouncerDSN(tb) })
			require.False(t, returned, "PgBouncerDSN returned a DSN")
			require.Equal(t, tc.wantSkip, rec.skipped, "skipped")
			require.Equal(t, !tc.wantSkip, rec.fatal, "failed")
			require.Len(t, rec.errors, 1)
			require.Contains(t, rec.errors[0], refsettest.EnvPgBouncer+" is not set")
		})
	}
}

// A PgBouncer that does not answer, named on purpose, fails the test at once, saying
// which, as a server that does not answer does: it is no reason to skip.
func TestPgBouncerDSNDeadPooler(t *testing.T) {
	for _, ci := range []string{"", "true"} {
		t.Run("CI="+ci, func(t *testing.T) {
			t.Setenv("CI", ci)
			// Port 1 on loopback refuses at once.
			t.Setenv(refsettest.EnvPgBouncer, "postgres://postgres@127.0.0.1:1/refset_test?sslmode=disable")
			rec, returned := run(t, func(tb testing.TB) { refsettest.PgBouncerDSN(tb) })
			require.False(t, returned, "PgBouncerDSN returned a DSN")
			require.True(t, rec.fatal, "failed: %q", rec.errors)
			require.Len(t, rec.errors, 1)
			require.Contains(t, rec.errors[0], "cannot reach the PgBouncer in "+refsettest.EnvPgBouncer)
		})
	}
}
