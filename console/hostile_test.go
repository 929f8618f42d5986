package console_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"html"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/lib/pq"
	"github.com/refsetdb/refset/console"
	"github.com/refsetdb/refset/internal/test/pgtest"
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

// Values are anyone's to write, and SQLite keeps bytes that are not UTF-8 as written:
// every page is UTF-8 (as its Content-Type says) without a control character, and
// shows each value, however long, escaped, never as markup.
func TestHostileBytesInPages(t *testing.T) {
	testdb.Each(t, []testdb.Backend{testdb.SQLite, testdb.LibPQ, testdb.Pgx}, func(t *testing.T, b testdb.Backend) {
		f := newFixture(t, b)
		ctx := t.Context()
		// ctlID and ctlHolder are UTF-8: pages and links take them. bad* are not.
		ctlID, ctlHolder := "ctl\x1b[2K\u202e<b>x</b>\x07", "h\x1b]0;pwned\x07\u202e<i>"
		longID := strings.Repeat("long<>", 20_000)
		values := []struct{ id, holder string }{{ctlID, ctlHolder}, {longID, strings.Repeat("L", 5000)}}
		if !b.Postgres {
			values = append(values, struct{ id, holder string }{"bad\xff\x1b<b>", "h\xfe\x01"})
		}
		require.NoError(t, refset.InTx(ctx, f.db, func(ctx context.Context, tx refset.Tx) error {
			for _, v := range values {
				for _, q := range []struct {
					sql  string
					args []any
				}{
					{`INSERT INTO notes (id, body) VALUES (?, ?)`, []any{v.id, "body\x1b[2J" + v.id}},
					{`INSERT INTO pins (note_id) VALUES (?)`, []any{v.id}},
					{`INSERT INTO notes_holds (holder, object_id) VALUES (?, ?)`, []any{v.holder, v.id}},
				} {
					if _, err := tx.ExecContext(ctx, f.db.Driver().Rebind(q.sql), q.args...); err != nil {
						return err
					}
				}
			}
			return nil
		}))
		// A table named with an escape sequence, which the pages name in their
		// warnings: a key ON DELETE CASCADE to the set that its program did not
		// declare a part. And a component's version so named.
		require.NoError(t, refset.InTx(ctx, f.db, func(ctx context.Context, tx refset.Tx) error {
			_, err := tx.ExecContext(ctx, "CREATE TABLE \"ev\x1b[2Jil\" (k TEXT PRIMARY KEY, \"c\x07ol\" TEXT REFERENCES notes (id) ON DELETE CASCADE)")
			if err != nil {
				return err
			}
			// A component's version recorded by hand.
			_, err = tx.ExecContext(ctx, "INSERT INTO refset_schema_version (component, version) VALUES ('comp\x1b[2J<b>', 1)")
			return err
		}))
		_, srv := serve(t, f.db, console.Config{SampleEvery: time.Second})
		time.Sleep(1100 * time.Millisecond) // a sample for the clean-up page
		for _, p := range []string{"/", "/?check=notes", "/cleanup", "/holds?table=notes",
			"/holds?" + url.Values{"table": {"notes"}, "holder": {ctlHolder}}.Encode(),
			objectPath("notes", ctlID), objectPath("notes", longID)} {
			code, body := get(t, srv, p, nil)
			require.Equal(t, http.StatusOK, code, "%.200s: %.2000s", p, body)
			require.True(t, utf8.ValidString(body), "%.200s: not UTF-8", p)
			i := strings.IndexFunc(body, func(r rune) bool { return r < ' ' && r != '\n' && r != '\t' && r != '\r' || r == 0x7f })
			require.Equal(t, -1, i, "%.200s: a control character at %d: %q", p, i, body[max(0, i-80):min(len(body), i+80)])
			require.NotContains(t, body, "<b>", p)
			require.NotContains(t, body, "<i>", p)
		}

		// Every value links to its own page, byte for byte: a value that does not
		// print as it is, quoted with Go's escapes, as the page shows it.
		_, holdsPage := get(t, srv, "/holds?table=notes", nil)
		holdsPage = html.UnescapeString(holdsPage)
		for _, v := range values[:len(values):len(values)] {
			id, holder := v.id, v.holder
			if v.id != longID {
				id, holder = strconv.Quote(v.id), strconv.Quote(v.holder)
			}
			require.True(t, strings.Contains(strings.ToLower(holdsPage), "holder="+strings.ToLower(url.QueryEscape(holder))), "the link to %.100q", v.holder)
			code, body := get(t, srv, objectPath("notes", id), nil)
			require.Equal(t, http.StatusOK, code, "%.200s: %.2000s", id, body)
			require.True(t, strings.Contains(html.UnescapeString(body), "pins.note_id"), "%.100q: its holder", id)
			code, body = get(t, srv, "/holds?"+url.Values{"table": {"notes"}, "holder": {holder}}.Encode(), nil)
			require.Equal(t, http.StatusOK, code, "%.200s: %.2000s", holder, body)
			require.True(t, strings.Contains(html.UnescapeString(body), `value="`+holder+`"`), "the form carries the holder %.100q as the link does", holder)
			require.True(t, strings.Contains(strings.ToLower(html.UnescapeString(body)), "id="+strings.ToLower(url.QueryEscape(id))), "%.100q's holds link to %.100q", v.holder, v.id)
		}
		// A quoted value that is no Go string, or that the database cannot hold, is
		// the visitor's mistake.
		bad := []string{objectPath("notes", `"unbalanced`), "/holds?table=notes&holder=" + url.QueryEscape(`"\q"`)}
		if b.Postgres {
			bad = append(bad, objectPath("notes", `"\xff"`), objectPath("notes", `"a\x00"`),
				"/holds?table=notes&holder="+url.QueryEscape(`"\xff"`), "/holds?table=notes&holder="+url.QueryEscape(`"\x00"`))
		}
		for _, p := range bad {
			code, body := get(t, srv, p, nil)
			require.Equal(t, http.StatusBadRequest, code, "%s: %s", p, body)
		}
	})
}

// A PostgreSQL server that restarts under the console (every connection ended), then
// cannot be reached for a while: each page answers at once with a server error (500,
// logged), never a page that shows nothing as though there were nothing, nor a hang;
// once the server is back, the same console serves every page again, and its sampler
// samples again.
func TestDatabaseRestarts(t *testing.T) {
	testdb.Each(t, []testdb.Backend{testdb.LibPQ, testdb.Pgx}, func(t *testing.T, b testdb.Backend) {
		f := newFixture(t, b)
		proxy, through := pgtest.NewProxy(t, f.place.At)
		rb := make([]byte, 6)
		_, _ = rand.Read(rb)
		app := "refset_console_restart_" + hex.EncodeToString(rb)
		u, err := url.Parse(through)
		require.NoError(t, err)
		q := u.Query()
		q.Set("application_name", app)
		u.RawQuery = q.Encode()
		db, err := postgres.Open(t.Context(), u.String(), postgres.Options{Driver: b.Driver})
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		logger, logs := testlog.New(slog.LevelInfo)
		_, srv := serve(t, db, console.Config{Logger: logger, SampleEvery: time.Second})
		paths := []string{"/", "/?check=notes", "/holds", "/holds?table=notes&holder=alice", "/chain", objectPath("notes", "n1")}
		for _, p := range paths {
			code, body := get(t, srv, p, nil)
			require.Equal(t, http.StatusOK, code, "%s: %s", p, body)
		}

		// The restart: every connection of the console's ended, and none taken
		// until the server is back.
		proxy.Refuse(true)
		_, err = f.db.(*postgres.DB).Pool().ExecContext(t.Context(),
			`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, app)
		require.NoError(t, err)
		for _, p := range paths {
			start := time.Now()
			code, body := get(t, srv, p, nil)
			require.Equal(t, http.StatusInternalServerError, code, "%s: %s", p, body)
			require.Contains(t, body, `class="error"`, p)
			require.Less(t, time.Since(start), 10*time.Second, "%s: answered late", p)
		}
		require.Contains(t, logs.String(), "level=ERROR")

		proxy.Refuse(false)
		for _, p := range paths {
			code, body := get(t, srv, p, nil)
			require.Equal(t, http.StatusOK, code, "%s after the restart: %s", p, body)
		}
		time.Sleep(2500 * time.Millisecond) // a sample succeeds
		code, body := get(t, srv, "/cleanup", nil)
		require.Equal(t, http.StatusOK, code)
		require.NotContains(t, body, "The last sample failed", "the sampler samples again")
	})
}
