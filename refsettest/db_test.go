package refsettest_test

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	_ "github.com/lib/pq"
	"github.com/stretchr/testify/assert"
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

// A test that leaves a transaction open on its schema (a Tx never committed, a
// connection never closed) must not stall at its end and leave the schema behind:
// the cleanup ends the sessions that hold the schema, fails the test naming each (its
// pid, application, state and query, so its author finds the leak), and drops the
// schema all the same. That holds for a pool the test opened on PostgresDSN and for
// Postgres's own database.
func TestLeakedTransaction(t *testing.T) {
	for _, tc := range []struct {
		name string
		// leak opens a transaction on a schema of tb's that it never ends, under
		// the application name leaky, and returns the schema.
		leak func(t *testing.T, tb testing.TB) string
	}{
		{"PostgresDSN", func(t *testing.T, tb testing.TB) string {
			u, err := url.Parse(refsettest.PostgresDSN(tb))
			require.NoError(t, err)
			q := u.Query()
			q.Set("application_name", "leaky")
			u.RawQuery = q.Encode()
			db, err := sql.Open("postgres", u.String())
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() }) // the outer test's: after the drop
			// Not t.Context(): database/sql rolls a transaction back when its context ends.
			tx, err := db.BeginTx(context.Background(), nil)
			require.NoError(t, err)
			var schema string
			require.NoError(t, tx.QueryRowContext(t.Context(), `SELECT current_schema()`).Scan(&schema))
			_, err = tx.ExecContext(t.Context(), `CREATE TABLE leaked (id TEXT PRIMARY KEY)`)
			require.NoError(t, err)
			_, err = tx.ExecContext(t.Context(), `INSERT INTO leaked VALUES ('x')`)
			require.NoError(t, err)
			return schema
		}},
		{"Postgres", func(t *testing.T, tb testing.TB) string {
			db := refsettest.Postgres(tb, postgres.Options{})
			exec(t, db, `CREATE TABLE leaked (id TEXT PRIMARY KEY)`)
			_, err := db.Pool().ExecContext(t.Context(), `SET application_name = leaky`)
			require.NoError(t, err)
			db.Pool().SetMaxOpenConns(1) // the one session, so the SET above is the Tx's
			tx, err := db.Begin(context.Background())
			require.NoError(t, err)
			var schema string
			require.NoError(t, tx.QueryRowContext(t.Context(), `SELECT current_schema()`).Scan(&schema))
			_, err = tx.ExecContext(t.Context(), `INSERT INTO leaked VALUES ('x')`)
			require.NoError(t, err)
			return schema
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var rec *recorder
			var schema string
			start := time.Now()
			t.Run("inner", func(t *testing.T) {
				rec, _ = run(t, func(tb testing.TB) { schema = tc.leak(t, tb) })
			})
			if schema == "" {
				t.Fatalf("no schema: %q", rec.errors) // or skipped, outside CI
			}
			took := time.Since(start)

			assert.Less(t, took, 10*time.Second, "the cleanup waited for the leaked transaction")
			require.Len(t, rec.errors, 1, "%q", rec.errors)
			for _, want := range []string{schema, "pid ", `application "leaky"`, `state "idle in transaction"`, `INSERT INTO leaked`, "Terminated so the schema could be dropped"} {
				assert.Contains(t, rec.errors[0], want)
			}
			admin, err := sql.Open("postgres", os.Getenv(refsettest.EnvPostgres))
			require.NoError(t, err)
			defer admin.Close()
			var left int
			require.NoError(t, admin.QueryRowContext(t.Context(), `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, schema).Scan(&left))
			assert.Zero(t, left, "schema %s dropped all the same", schema)
		})
	}
}
