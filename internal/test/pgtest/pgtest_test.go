package pgtest

import (
	"database/sql"
	"fmt"
	"runtime"
	"testing"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"
)

// open opens dsn and closes it when t ends. Cleanups run last-in first-out,
// so this Close runs before the schema drop registered by an earlier New.
func open(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("postgres", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db
}

// useTable creates table t through db, inserts value and returns every row
// db can then see in t.
func useTable(t *testing.T, db *sql.DB, value string) []string {
	t.Helper()
	ctx := t.Context()
	_, err := db.ExecContext(ctx, `CREATE TABLE t (v text NOT NULL)`)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `INSERT INTO t (v) VALUES ($1)`, value)
	require.NoError(t, err)
	return values(t, db)
}

// values returns every row db sees in table t.
func values(t *testing.T, db *sql.DB) []string {
	t.Helper()
	var got []string
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT array_agg(v ORDER BY v) FROM t`).Scan(pq.Array(&got)))
	return got
}

// TestParallelSubtestsAreIsolated checks that tests running at the same time
// each get their own schema: both create a table with the same name and
// see only their own row.
func TestParallelSubtestsAreIsolated(t *testing.T) {
	for _, tc := range []struct{ name, value string }{
		{"first", "one"},
		{"second", "two"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dsn, schema := New(t)
			db := open(t, dsn)

			require.Equal(t, []string{tc.value}, useTable(t, db, tc.value))

			// The unqualified table must have landed in our schema, not in
			// public, where the other subtest would trip over it.
			var where string
			require.NoError(t, db.QueryRowContext(t.Context(),
				`SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
				 WHERE c.oid = 't'::regclass`).Scan(&where))
			require.Equal(t, schema, where)
		})
	}
}

// TestSchemasCoexist holds two schemas at once in one test, so the overlap
// does not depend on how the scheduler runs parallel subtests.
func TestSchemasCoexist(t *testing.T) {
	dsnA, schemaA := New(t)
	dsnB, schemaB := New(t)
	require.NotEqual(t, schemaA, schemaB)

	dbA, dbB := open(t, dsnA), open(t, dsnB)
	require.Equal(t, []string{"a"}, useTable(t, dbA, "a"))
	require.Equal(t, []string{"b"}, useTable(t, dbB, "b"))

	// Re-read A after B wrote, through a second pool, to show the isolation
	// comes from the DSN and holds for every connection opened from it.
	require.Equal(t, []string{"a"}, values(t, open(t, dsnA)))
}

// TestCleanupDropsSchema checks that the schema and its tables are gone once
// the test that created them has finished.
func TestCleanupDropsSchema(t *testing.T) {
	admin := open(t, baseDSN(t))
	exists := func(t *testing.T, schema string) bool {
		t.Helper()
		var ok bool
		require.NoError(t, admin.QueryRowContext(t.Context(),
			`SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&ok))
		return ok
	}

	var schema string
	if !t.Run("inner", func(t *testing.T) {
		var dsn string
		dsn, schema = New(t)
		require.Equal(t, []string{"x"}, useTable(t, open(t, dsn), "x"))
		require.True(t, exists(t, schema), "schema %s should exist during the test", schema)
	}) {
		t.FailNow()
	}
	// t.Run returns only after the subtest's cleanups have run.
	require.False(t, exists(t, schema), "schema %s should be dropped after the test", schema)
}

// TestWithSearchPath needs no server: it checks the DSN rewriting, and that
// lib/pq reads the result back as a search_path run-time parameter.
func TestWithSearchPath(t *testing.T) {
	const schema = "refset_t_0123456789ab"
	tests := []rewriteCase{
		{
			name: "url without query",
			dsn:  "postgres://u@127.0.0.1:5432/db",
			want: "postgres://u@127.0.0.1:5432/db?search_path=" + schema,
		},
		{
			name: "url keeps existing params",
			dsn:  "postgres://u:p%40ss@127.0.0.1:5432/db?sslmode=disable&application_name=x",
			want: "postgres://u:p%40ss@127.0.0.1:5432/db?application_name=x&search_path=" + schema + "&sslmode=disable",
		},
		{
			name: "url replaces search_path",
			dsn:  "postgresql://127.0.0.1/db?search_path=public",
			want: "postgresql://127.0.0.1/db?search_path=" + schema,
		},
		{
			name: "key value",
			dsn:  "host=127.0.0.1 dbname=db sslmode=disable",
			want: "host=127.0.0.1 dbname=db sslmode=disable search_path='" + schema + "'",
		},
		{
			name: "key value overrides search_path",
			dsn:  "host=127.0.0.1 search_path=public",
			want: "host=127.0.0.1 search_path=public search_path='" + schema + "'",
		},
	}
	requireRewrites(t, func(dsn string) (string, error) { return withSearchPath(dsn, schema) }, tests,
		func(t *testing.T, cfg pq.Config) { require.Equal(t, schema, cfg.Runtime["search_path"]) })

	t.Run("bad url hides password", func(t *testing.T) {
		_, err := withSearchPath("postgres://u:secret@127.0.0.1:bad/db", schema)
		require.Error(t, err)
		require.NotContains(t, err.Error(), "secret")
	})
}

// rewriteCase is a DSN a rewrite of it must turn into want.
type rewriteCase struct{ name, dsn, want string }

// requireRewrites checks that rewrite turns each case's DSN into its want, and that
// lib/pq reads the result back as check expects.
func requireRewrites(t *testing.T, rewrite func(dsn string) (string, error), cases []rewriteCase, check func(*testing.T, pq.Config)) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := rewrite(tc.dsn)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			cfg, err := pq.NewConfig(got)
			require.NoError(t, err)
			check(t, cfg)
		})
	}
}

// fakeTB records how a function of this package gives up instead of ending the
// real test.
type fakeTB struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Skip(args ...any) { f.skipped, f.msg = true, fmt.Sprint(args...); runtime.Goexit() }

func (f *fakeTB) Fatal(args ...any) { f.failed, f.msg = true, fmt.Sprint(args...); runtime.Goexit() }

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestMissingOrDeadServer checks when New skips and when it fails. It sets
// environment variables, so it cannot run in parallel.
func TestMissingOrDeadServer(t *testing.T) {
	tests := []struct {
		name, ci, dsn string
		wantSkip      bool
		wantMsg       string
	}{
		{name: "unset outside CI skips", ci: "", dsn: "", wantSkip: true, wantMsg: "run make test"},
		{name: "unset under CI fails", ci: "true", dsn: "", wantMsg: "run make test"},
		{
			// Port 1 on loopback refuses at once; a set DSN that does not
			// answer is an error even on a laptop.
			name: "dead server outside CI fails", ci: "",
			dsn:     "postgres://postgres@127.0.0.1:1/x?sslmode=disable",
			wantMsg: "cannot reach the server",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			t.Setenv(EnvDSN, tc.dsn)
			requireGivesUp(t, func(tb testing.TB) { New(tb) }, tc.wantSkip, tc.wantMsg)
		})
	}
}

// requireGivesUp runs fn with a fakeTB for t and checks that it gives up as it
// should: it skips (wantSkip) or fails, saying msg.
func requireGivesUp(t *testing.T, fn func(testing.TB), wantSkip bool, msg string) {
	t.Helper()
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
		t.Error("returned instead of giving up")
	}()
	<-done
	require.Equal(t, wantSkip, f.skipped, "skipped")
	require.Equal(t, !wantSkip, f.failed, "failed")
	require.Contains(t, f.msg, msg)
}
