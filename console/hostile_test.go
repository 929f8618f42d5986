package console_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"html"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/refsetdb/refset/console"
	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/internal/test/testlog"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/stretchr/testify/require"
)

// A database that refuses the console's role (no SELECT on a set's table, or no
// login at all once the role is changed) is the server's trouble, for the operator
// to hear of: 500 and a line in the log, on each driver. It is no visitor's bad
// request (400, unlogged), nor does the object page blame the id for it. An id the
// id column cannot hold still is the visitor's mistake: 400.
func TestDatabaseRefusalsAreServerErrors(t *testing.T) {
	testdb.Each(t, []testdb.Backend{testdb.LibPQ, testdb.Pgx}, func(t *testing.T, b testdb.Backend) {
		f := newFixture(t, b)
		ctx := t.Context()
		require.NoError(t, refset.InTx(ctx, f.db, func(ctx context.Context, tx refset.Tx) error {
			_, err := tx.ExecContext(ctx, `CREATE TABLE items (id BIGINT PRIMARY KEY)`)
			return err
		}))
		_, err := store.NewStore[item, int64](ctx, f.db, store.Config{Table: "items"})
		require.NoError(t, err)

		admin := f.db.(*postgres.DB).Pool()
		rb := make([]byte, 6)
		_, _ = rand.Read(rb)
		role := "refset_console_" + hex.EncodeToString(rb)
		exec := func(q string) {
			t.Helper()
			_, err := admin.ExecContext(ctx, q)
			require.NoError(t, err, q)
		}
		exec(`CREATE ROLE ` + pq.QuoteIdentifier(role) + ` LOGIN`)
		t.Cleanup(func() {
			// Not t.Context(), which has ended; after the role's pool closed.
			for _, q := range []string{`DROP OWNED BY ` + pq.QuoteIdentifier(role), `DROP ROLE ` + pq.QuoteIdentifier(role)} {
				if _, err := admin.Exec(q); err != nil {
					t.Errorf("%s: %v", q, err)
				}
			}
		})
		schema := pq.QuoteIdentifier(f.place.Schema)
		exec(`GRANT USAGE ON SCHEMA ` + schema + ` TO ` + pq.QuoteIdentifier(role))
		exec(`GRANT SELECT ON ALL TABLES IN SCHEMA ` + schema + ` TO ` + pq.QuoteIdentifier(role))
		exec(`REVOKE SELECT ON ` + schema + `.notes FROM ` + pq.QuoteIdentifier(role))
		u, err := url.Parse(f.place.At)
		require.NoError(t, err)
		u.User = url.User(role)
		ro, err := postgres.Open(ctx, u.String(), postgres.Options{Driver: b.Driver})
		require.NoError(t, err)
		t.Cleanup(func() { ro.Close() })
		logger, logs := testlog.New(slog.LevelInfo)
		_, srv := serve(t, ro, console.Config{Logger: logger})

		for _, c := range []struct {
			path string
			code int
			says string
		}{
			{objectPath("notes", "n1"), http.StatusInternalServerError, "permission denied for table notes"},
			{"/", http.StatusInternalServerError, "permission denied for table notes"},
			{objectPath("items", "abc"), http.StatusBadRequest, "cannot hold the id"},
			{objectPath("items", "99999999999999999999"), http.StatusBadRequest, "cannot hold the id"},
		} {
			code, body := get(t, srv, c.path, nil)
			body = html.UnescapeString(body)
			require.Equal(t, c.code, code, "%s: %s", c.path, body)
			require.Contains(t, body, c.says, c.path)
			if c.code == http.StatusInternalServerError {
				require.NotContains(t, body, "cannot hold the id", "%s: the id is not what the database refused", c.path)
				require.Contains(t, logs.String(), "level=ERROR", "%s: the operator hears of it", c.path)
			}
		}

		// The role may log in no more: the pool's next connection is refused.
		exec(`ALTER ROLE ` + pq.QuoteIdentifier(role) + ` NOLOGIN`)
		exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '` + role + `'`)
		refused := false
		for _, p := range []string{"/", objectPath("items", "1"), "/holds?table=items", "/chain", "/", objectPath("items", "1")} {
			before := strings.Count(logs.String(), "level=ERROR")
			code, body := get(t, srv, p, nil)
			body = html.UnescapeString(body)
			require.Equal(t, http.StatusInternalServerError, code, "%s: %s", p, body)
			require.Greater(t, strings.Count(logs.String(), "level=ERROR"), before, "%s: not logged", p)
			refused = refused || strings.Contains(body, "not permitted to log in")
		}
		require.True(t, refused, "no page said the role may not log in")
	})
}

// A closed database (a program that mounted the console and closed its database
// under it) answers each page that reads with an error, never a 200 page that shows
// nothing as though there were nothing to show.
func TestClosedDatabase(t *testing.T) {
	testdb.Each(t, []testdb.Backend{testdb.SQLite, testdb.LibPQ}, func(t *testing.T, b testdb.Backend) {
		f := newFixture(t, b)
		_, srv := serve(t, f.db, console.Config{SampleEvery: time.Second})
		require.NoError(t, f.db.Close())
		for _, p := range []string{"/", "/?check=notes", "/holds", "/holds?table=notes", "/chain", objectPath("notes", "n1")} {
			code, body := get(t, srv, p, nil)
			require.Equal(t, http.StatusInternalServerError, code, "%s: %s", p, body)
			require.Contains(t, body, `class="error"`, p)
		}
	})
}

// A set's table named with its schema, or without, is the set's, as refset --table
// takes it (public.notes for a set on notes on PostgreSQL, main.notes on SQLite):
// the pages show it, not a 404 that says there is no set and to build its store.
// A table that is not a set's, in any spelling, stays 404.
func TestQualifiedTableNames(t *testing.T) {
	testdb.Each(t, []testdb.Backend{testdb.SQLite, testdb.LibPQ}, func(t *testing.T, b testdb.Backend) {
		f := newFixture(t, b)
		_, srv := serve(t, f.db, console.Config{})
		schema := "main"
		if b.Postgres {
			schema = f.place.Schema
		}
		for _, c := range []struct {
			path string
			code int
			says string
		}{
			{"/?check=" + schema + ".notes", http.StatusOK, `id="check"`},
			{objectPath(schema+".notes", "n1"), http.StatusOK, "body of n1"},
			{"/holds?table=" + schema + ".notes&holder=alice", http.StatusOK, "alice"},
			{"/?check=notes", http.StatusOK, `id="check"`},
			{"/chain?table=" + schema + ".blocks", http.StatusOK, `data-id="c7"`},
			{"/?check=" + schema + ".pins", http.StatusNotFound, "no set on table"},
			{objectPath(schema+".no_such_set", "n1"), http.StatusNotFound, "no set on table"},
			{"/holds?table=nosuchschema.notes", http.StatusNotFound, "no set on table"},
		} {
			code, body := get(t, srv, c.path, nil)
			require.Equal(t, c.code, code, "%s: %s", c.path, body)
			require.Contains(t, html.UnescapeString(body), c.says, c.path)
		}
	})
}
