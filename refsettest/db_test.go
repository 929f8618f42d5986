package refsettest_test

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"

	_ "github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsettest"
	"github.com/refsetdb/refset/store/postgres"
)

// TestPostgres checks that each test gets a schema of its own, through both drivers,
// that refset's tables land there, and that the schema is dropped at the end.
func TestPostgres(t *testing.T) {
	for _, driver := range []string{postgres.DriverLibPQ, postgres.DriverPgx} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			var schemas []string
			var dbs []*postgres.DB
			t.Run("inner", func(t *testing.T) {
				for range 2 {
					db := refsettest.Postgres(t, postgres.Options{Driver: driver})
					dbs = append(dbs, db)
					var schema string
					require.NoError(t, db.Pool().GetContext(t.Context(), &schema, `SELECT current_schema()`))
					require.True(t, strings.HasPrefix(schema, refsettest.SchemaPrefix), "schema %s", schema)
					schemas = append(schemas, schema)
					// Every connection of the pool is in the schema, not only the first.
					db.Pool().SetMaxIdleConns(0)
					exec(t, db, `CREATE TABLE t (id TEXT PRIMARY KEY)`)
					exec(t, db, `INSERT INTO t (id) VALUES ('`+schema+`')`)
				}
				require.NotEqual(t, schemas[0], schemas[1])
				for i, db := range dbs {
					var rows []string
					require.NoError(t, db.Pool().SelectContext(t.Context(), &rows, `SELECT id FROM t`))
					require.Equal(t, []string{schemas[i]}, rows, "each sees its own table only")
					var where string
					require.NoError(t, db.Pool().GetContext(t.Context(), &where,
						`SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = 't'::regclass`))
					require.Equal(t, schemas[i], where, "the table in the schema")
				}
			})
			if len(dbs) < 2 {
				// The inner test ended early: it failed (and so does this one), or
				// it was skipped for want of a server outside CI.
				return
			}
			for _, db := range dbs {
				_, err := db.Begin(context.Background())
				require.ErrorIs(t, err, refset.ErrClosed, "closed when the test ended")
			}
			admin, err := sql.Open("postgres", os.Getenv(refsettest.EnvPostgres))
			require.NoError(t, err)
			defer admin.Close()
			var left int
			require.NoError(t, admin.QueryRowContext(t.Context(),
				`SELECT count(*) FROM pg_namespace WHERE nspname = ANY (ARRAY[$1, $2])`, schemas[0], schemas[1]).Scan(&left))
			require.Zero(t, left, "schemas dropped when the test ended")
		})
	}
}

// TestPostgresWithoutServer checks when Postgres skips and when it fails. It sets
// environment variables, so it cannot run in parallel.
func TestPostgresWithoutServer(t *testing.T) {
	tests := []struct {
		name, ci, dsn string
		wantSkip      bool
		wantMsg       string
	}{
		{name: "unset skips", dsn: "", wantSkip: true, wantMsg: refsettest.EnvPostgres + " is not set"},
		{name: "unset under CI fails", ci: "true", dsn: "", wantMsg: "CI=true, so this is a failure"},
		{
			// Port 1 on loopback refuses at once; a DSN set on purpose that does not
			// answer fails even outside CI.
			name: "dead server fails", dsn: "postgres://postgres@127.0.0.1:1/x?sslmode=disable",
			wantMsg: "cannot reach the server in " + refsettest.EnvPostgres,
		},
		{
			name: "malformed URL fails without showing the password", dsn: "postgres://u:secret@127.0.0.1:bad/x",
			wantMsg: "is not a valid URL",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			t.Setenv(refsettest.EnvPostgres, tc.dsn)
			rec, returned := run(t, func(tb testing.TB) { refsettest.Postgres(tb, postgres.Options{}) })
			require.False(t, returned, "Postgres returned a database")
			require.Equal(t, tc.wantSkip, rec.skipped, "skipped")
			require.Equal(t, !tc.wantSkip, rec.fatal, "failed")
			require.Len(t, rec.errors, 1)
			require.Contains(t, rec.errors[0], tc.wantMsg)
			require.NotContains(t, rec.errors[0], "secret")
		})
	}
}

// TestPostgresDSN checks that the DSN names one schema of the test's own, which
// several pools (lib/pq and pgx) share, as several processes of a program would, and
// which is dropped when the test ends.
func TestPostgresDSN(t *testing.T) {
	var schema string
	t.Run("inner", func(t *testing.T) {
		dsn := refsettest.PostgresDSN(t)
		var dbs []*postgres.DB
		for _, driver := range []string{postgres.DriverLibPQ, postgres.DriverPgx} {
			db, err := postgres.Open(t.Context(), dsn, postgres.Options{Driver: driver})
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() }) // before the drop
			dbs = append(dbs, db)
		}
		require.NoError(t, dbs[0].Pool().GetContext(t.Context(), &schema, `SELECT current_schema()`))
		require.True(t, strings.HasPrefix(schema, refsettest.SchemaPrefix), "schema %s", schema)
		exec(t, dbs[0], `CREATE TABLE t (id TEXT PRIMARY KEY)`)
		exec(t, dbs[0], `INSERT INTO t (id) VALUES ('one')`)
		var rows []string
		require.NoError(t, dbs[1].Pool().SelectContext(t.Context(), &rows, `SELECT id FROM t`))
		require.Equal(t, []string{"one"}, rows, "the other pool sees the same schema")
	})
	if schema == "" {
		return // skipped for want of a server outside CI, or failed
	}
	admin, err := sql.Open("postgres", os.Getenv(refsettest.EnvPostgres))
	require.NoError(t, err)
	defer admin.Close()
	var left int
	require.NoError(t, admin.QueryRowContext(t.Context(), `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, schema).Scan(&left))
	require.Zero(t, left, "schema dropped when the test ended")
}
