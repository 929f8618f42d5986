package console_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/console"
	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/internal/test/testlog"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/stretchr/testify/require"
)

// pages are the paths of every page the fixture has, as an operator reaches them.
var pages = []string{
	"/", "/?check=notes", "/cleanup", "/chain", "/holds", "/holds?table=notes", "/holds?table=notes&holder=alice",
	objectPath("notes", "n1"), objectPath("notes", hostileID), objectPath("blocks", "c3"), objectPath("blocks", "p9"),
}

func TestCheckAddr(t *testing.T) {
	for _, c := range []struct {
		addr, token string
		ok          bool
	}{
		{"127.0.0.1:8080", "", true},
		{"127.1.2.3:0", "", true},
		{"[::1]:8080", "", true},
		{"localhost:8080", "", true},
		{"0.0.0.0:8080", "", false},
		{":8080", "", false}, // every interface
		{"[::]:8080", "", false},
		{"192.0.2.1:8080", "", false},
		{"console.example:8080", "", false},
		{"0.0.0.0:8080", "t", true},
		{"192.0.2.1:8080", "t", true},
		{"127.0.0.1", "", false}, // no port
	} {
		err := console.CheckAddr(c.addr, c.token)
		if c.ok {
			require.NoError(t, err, c.addr)
		} else {
			require.ErrorIs(t, err, refset.ErrInvalidConfig, c.addr)
		}
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	db := testdb.SQLite.Open(t, testdb.Options{})
	for name, cfg := range map[string]console.Config{
		"sampling too often": {SampleEvery: 10 * time.Millisecond},
		"negative samples":   {Samples: -1},
		"negative depth":     {Depth: -1},
	} {
		_, err := console.New(t.Context(), db, cfg)
		require.ErrorIs(t, err, refset.ErrInvalidConfig, name)
	}
	_, err := console.New(t.Context(), &postgres.DB{}, console.Config{})
	require.ErrorIs(t, err, refset.ErrInvalidConfig, "a database of no store")
}

// With a token, a request without it, or with another, gets nothing but 401;
// Authorization: Bearer and the cookie /login sets both pass.
// Without a token the console answers only requests addressed to a loopback host: a
// page of another site whose name was rebound to 127.0.0.1 (DNS rebinding) reads
// nothing. With a token, the token decides.
func TestLoopbackHostOnlyWithoutToken(t *testing.T) {
	f := newFixture(t, testdb.SQLite)
	_, open := serve(t, f.db, console.Config{})
	_, withToken := serve(t, f.db, console.Config{Token: "tok"})
	for _, tc := range []struct {
		host string
		want int
	}{
		{"127.0.0.1:8080", http.StatusOK},
		{"localhost:8080", http.StatusOK},
		{"localhost", http.StatusOK},
		{"[::1]:8080", http.StatusOK},
		{"127.0.0.2", http.StatusOK},
		{"attacker.example:8080", http.StatusForbidden},
		{"attacker.example", http.StatusForbidden},
		{"10.0.0.1:8080", http.StatusForbidden},
		{"localhost.attacker.example", http.StatusForbidden},
	} {
		t.Run(tc.host, func(t *testing.T) {
			for _, p := range pages {
				code, body := get(t, open, p, http.Header{"Host": {tc.host}})
				require.Equal(t, tc.want, code, p)
				if tc.want != http.StatusOK {
					require.NotContains(t, body, "notes", p)
				}
			}
			code, _ := get(t, withToken, "/", http.Header{"Host": {tc.host}, "Authorization": {"Bearer tok"}})
			require.Equal(t, http.StatusOK, code, "with a token, the token decides")
		})
	}
}

func TestToken(t *testing.T) {
	f := newFixture(t, testdb.SQLite)
	const token = "the token"
	_, srv := serve(t, f.db, console.Config{Token: token})
	bearer := func(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }
	for name, h := range map[string]http.Header{
		"none":         nil,
		"wrong":        bearer("the toke"),
		"longer":       bearer(token + "n"),
		"empty":        bearer(""),
		"basic":        {"Authorization": {"Basic " + token}},
		"wrong cookie": {"Cookie": {"refset_console_token=nope"}},
	} {
		for _, p := range pages {
			code, body := get(t, srv, p, h)
			require.Equal(t, http.StatusUnauthorized, code, "%s %s", name, p)
			require.NotContains(t, body, "notes", "%s %s", name, p)
		}
	}
	for _, p := range pages {
		code, _ := get(t, srv, p, bearer(token))
		require.Equal(t, http.StatusOK, code, p)
		// The scheme's name is case-insensitive (RFC 7235).
		code, _ = get(t, srv, p, http.Header{"Authorization": {"bearer " + token}})
		require.Equal(t, http.StatusOK, code, p)
	}
	code, _ := get(t, srv, "/login?token=wrong", nil)
	require.Equal(t, http.StatusUnauthorized, code)

	// /login sets the cookie and sends the browser to the sets.
	client := srv.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := client.Get(srv.URL + "/login?" + url.Values{"token": {token}}.Encode())
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	cookies := resp.Cookies()
	require.Len(t, cookies, 1)
	require.True(t, cookies[0].HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, cookies[0].SameSite)
	code, _ = get(t, srv, "/", http.Header{"Cookie": {(&http.Cookie{Name: cookies[0].Name, Value: cookies[0].Value}).String()}})
	require.Equal(t, http.StatusOK, code)
}

// A browser logs in with /login?token=... and lands on the console's sets, whatever
// the token holds (characters a cookie cannot carry included) and wherever the
// console is mounted (under a prefix, as docs/console.md shows); the cookie goes
// back to the console alone, not to the rest of the host's site.
func TestLoginAsABrowser(t *testing.T) {
	f := newFixture(t, testdb.SQLite)
	for _, token := range []string{"the token", `a;b"c\d,e`, "tök en"} {
		for _, mount := range []string{"", "/refset"} {
			t.Run(token+" at "+mount+"/", func(t *testing.T) {
				h, err := console.New(t.Context(), f.db, console.Config{Token: token})
				require.NoError(t, err)
				t.Cleanup(func() { require.NoError(t, h.Close()) })
				mux := http.NewServeMux()
				mux.Handle(mount+"/", http.StripPrefix(mount, h))
				mux.HandleFunc("/elsewhere", func(w http.ResponseWriter, r *http.Request) {
					_, err := r.Cookie("refset_console_token")
					fmt.Fprint(w, "cookie sent: ", err == nil)
				})
				srv := httptest.NewServer(mux)
				t.Cleanup(srv.Close)
				jar, err := cookiejar.New(nil)
				require.NoError(t, err)
				client := &http.Client{Jar: jar}

				resp, err := client.Get(srv.URL + mount + "/login?" + url.Values{"token": {token}}.Encode())
				require.NoError(t, err)
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
				require.Equal(t, mount+"/", resp.Request.URL.Path, "where /login sent the browser")
				require.Contains(t, string(body), "notes")

				if mount != "" {
					resp, err := client.Get(srv.URL + "/elsewhere")
					require.NoError(t, err)
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					require.Equal(t, "cookie sent: false", string(body), "the console's cookie went to the rest of the site")
				}
			})
		}
	}
}

// The console answers GET and HEAD alone, and each page's errors with their status.
func TestRequests(t *testing.T) {
	f := newFixture(t, testdb.SQLite)
	_, srv := serve(t, f.db, console.Config{})
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		req, err := http.NewRequestWithContext(t.Context(), m, srv.URL+"/?check=notes", strings.NewReader("x"))
		require.NoError(t, err)
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, m)
	}
	for _, c := range []struct {
		path string
		code int
	}{
		{"/object?table=notes", http.StatusBadRequest},
		{objectPath("notes", "no such note"), http.StatusNotFound},
		{objectPath("no_such_set", "n1"), http.StatusNotFound},
		{objectPath(`bad"name`, "n1"), http.StatusBadRequest},
		{"/chain?table=notes", http.StatusNotFound},
		{"/chain?table=nosuch.blocks", http.StatusNotFound},
		{"/chain?table=bad%22name", http.StatusBadRequest},
		{"/chain", http.StatusOK},
		{"/chain?table=blocks", http.StatusOK},
		{"/holds?table=no_such_set", http.StatusNotFound},
		{"/?check=no_such_set", http.StatusNotFound},
		{"/no-such-page", http.StatusNotFound},
		{"/static/console.css", http.StatusOK},
	} {
		code, body := get(t, srv, c.path, nil)
		require.Equal(t, c.code, code, "%s: %s", c.path, body)
	}
	code, body := get(t, srv, "/", nil)
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, "<script", "the console carries no JavaScript")
}

// Every value a page shows is escaped: the hostile ID, and a hostile holder, appear
// as text, never as markup.
func TestEscaping(t *testing.T) {
	f := newFixture(t, testdb.SQLite)
	_, srv := serve(t, f.db, console.Config{})
	for _, p := range []string{objectPath("notes", hostileID), "/holds?table=notes&holder=mallory"} {
		code, body := get(t, srv, p, nil)
		require.Equal(t, http.StatusOK, code, p)
		require.NotContains(t, body, "<img", p)
		require.Contains(t, html.UnescapeString(body), hostileID, p)
	}
}

// A role that may only SELECT runs every page on PostgreSQL: the console writes
// nothing. Its password appears in no page and no log line.
func TestSelectOnlyRole(t *testing.T) {
	f := newFixture(t, testdb.LibPQ)
	ctx := t.Context()
	admin := f.db.(*postgres.DB).Pool()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	role, password := "refset_console_"+hex.EncodeToString(b), "pw-"+hex.EncodeToString(b)+"-secret"
	exec := func(q string) {
		t.Helper()
		_, err := admin.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	exec(`CREATE ROLE ` + pq.QuoteIdentifier(role) + ` LOGIN PASSWORD '` + password + `'`)
	t.Cleanup(func() {
		// Not t.Context(), which has ended; after the role's pool closed.
		for _, q := range []string{`DROP OWNED BY ` + pq.QuoteIdentifier(role), `DROP ROLE ` + pq.QuoteIdentifier(role)} {
			if _, err := admin.Exec(q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})
	exec(`GRANT USAGE ON SCHEMA ` + pq.QuoteIdentifier(f.place.Schema) + ` TO ` + pq.QuoteIdentifier(role))
	exec(`GRANT SELECT ON ALL TABLES IN SCHEMA ` + pq.QuoteIdentifier(f.place.Schema) + ` TO ` + pq.QuoteIdentifier(role))
	u, err := url.Parse(f.place.At)
	require.NoError(t, err)
	u.User = url.UserPassword(role, password)
	logger, logs := testlog.New(slog.LevelInfo) // slog's default level: the sampler's warnings
	ro, err := postgres.Open(ctx, u.String(), postgres.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { ro.Close() })
	_, srv := serve(t, ro, console.Config{Logger: logger, SampleEvery: time.Second})
	// The role really is read-only: a write is refused.
	_, err = ro.Pool().ExecContext(ctx, `DELETE FROM pins`)
	require.Error(t, err)
	for _, p := range pages {
		code, body := get(t, srv, p, nil)
		require.Equal(t, http.StatusOK, code, "%s: %s", p, body)
		require.NotContains(t, body, password, p)
	}
	require.Eventually(t, func() bool {
		_, body := get(t, srv, "/cleanup", nil)
		return strings.Contains(body, `class="line"`)
	}, 20*time.Second, 200*time.Millisecond, "the sampler samples as the role")
	require.NotContains(t, logs.String(), password)
	require.NotContains(t, logs.String(), "level=WARN", "the sampler failed")
}

// The sampler samples every SampleEvery while the console runs, and stops at Close,
// or when the context New was given ends; the pages go on serving what it took.
func TestSamplerStops(t *testing.T) {
	f := newFixture(t, testdb.SQLite)
	samples := func(srv *httptest.Server) int {
		t.Helper()
		_, body := get(t, srv, "/cleanup", nil)
		var n int
		_, err := fmt.Sscanf(body[strings.Index(body, "<main>")+len("<main>"):], "\n\n<h1>Clean-up over time</h1>\n<p>%d samples", &n)
		require.NoError(t, err, body)
		return n
	}
	for _, stop := range []string{"Close", "context"} {
		t.Run(stop, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			h, err := console.New(ctx, f.db, console.Config{SampleEvery: time.Second})
			require.NoError(t, err)
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			require.Eventually(t, func() bool { return samples(srv) >= 2 }, 10*time.Second, 100*time.Millisecond)
			if stop == "Close" {
				require.NoError(t, h.Close())
			} else {
				cancel()
			}
			time.Sleep(100 * time.Millisecond) // a sample under way ends
			n := samples(srv)
			time.Sleep(2500 * time.Millisecond)
			require.Equal(t, n, samples(srv), "a sample after the stop")
			require.NoError(t, h.Close(), "Close after the context ended, or twice")
			cancel()
		})
	}
}

// A console closed while its first sample is under way (as one is, right after New)
// says nothing failed: stopping is no failure.
func TestCloseIsNoFailure(t *testing.T) {
	f := newFixture(t, testdb.SQLite)
	for range 10 {
		h, err := console.New(t.Context(), f.db, console.Config{})
		require.NoError(t, err)
		require.NoError(t, h.Close())
		srv := httptest.NewServer(h)
		code, body := get(t, srv, "/cleanup", nil)
		srv.Close()
		require.Equal(t, http.StatusOK, code)
		require.NotContains(t, body, "failed")
	}
}

// With a hot standby as the database's replica (postgres.Options.ReplicaDSN, refset
// ui's --replica), every page answers, reading the standby first.
func TestStandby(t *testing.T) {
	f := newFixture(t, testdb.Standby)
	_, srv := serve(t, f.db, console.Config{})
	for _, p := range pages {
		code, body := get(t, srv, p, nil)
		require.Equal(t, http.StatusOK, code, "%s: %s", p, body)
	}
	_, body := get(t, srv, "/chain", nil)
	require.Contains(t, body, `data-id="p9"`, "the chain as the primary has it")
}

// The clean-up page charts the objects collected per minute from the count clean-up
// keeps of what it deleted: right though objects are added meanwhile (the fall in the
// object count, which the page once charted, would show none collected here).
func TestCollectedPerMinute(t *testing.T) {
	f := newFixture(t, testdb.SQLite)
	ctx := t.Context()
	_, srv := serve(t, f.db, console.Config{SampleEvery: time.Second})
	caption := func() string {
		t.Helper()
		_, body := get(t, srv, "/cleanup", nil)
		_, rest, _ := strings.Cut(body, "objects collected per minute in notes: ") // "" before two samples
		line, _, _ := strings.Cut(rest, "</figcaption>")
		return line
	}
	require.Eventually(t, func() bool { return strings.HasPrefix(caption(), "now 0 objects/min, at most 0") }, 10*time.Second, 100*time.Millisecond)
	col, err := cleanup.Install(ctx, f.db, cleanup.Config{Table: "notes"})
	require.NoError(t, err)
	require.NoError(t, refset.InTx(ctx, f.db, func(ctx context.Context, tx refset.Tx) error {
		// n5 is garbage: due now. And as many new notes as will be collected.
		if _, err := tx.ExecContext(ctx, `UPDATE notes_review SET review_after = 0 WHERE object_id = 'n5'`); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO notes (id, body) VALUES ('n6', 'new'), ('n7', 'new')`)
		return err
	}))
	stats, err := col.Collect(ctx)
	require.NoError(t, err)
	require.Positive(t, stats.Deleted)
	var most float64
	require.Eventually(t, func() bool {
		_, at, _ := strings.Cut(caption(), "at most ")
		_, err := fmt.Sscanf(at, "%f", &most)
		return err == nil && most > 0
	}, 10*time.Second, 100*time.Millisecond)
	// What was deleted in one sample interval (a second, give or take the
	// database's clock), per minute.
	require.InDelta(t, 60*float64(stats.Deleted), most, 30*float64(stats.Deleted))
	st, err := cleanup.Status(ctx, f.db)
	require.NoError(t, err)
	require.Equal(t, stats.Deleted, st.Sets[1].Collected, "notes")
}

// The object page's cost follows what it shows, however many rows and holds keep the
// object alive: it lists the first of each and says the rest are there.
func TestObjectPageIsBounded(t *testing.T) {
	f := newFixture(t, testdb.SQLite)
	require.NoError(t, refset.InTx(t.Context(), f.db, func(ctx context.Context, tx refset.Tx) error {
		for _, q := range []string{
			`CREATE TABLE tags (id INTEGER PRIMARY KEY, note_id TEXT NOT NULL REFERENCES notes (id))`,
			`CREATE INDEX tags_note ON tags (note_id)`,
			`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000)
				INSERT INTO tags (note_id) SELECT 'n5' FROM n`,
			`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000)
				INSERT INTO notes_holds (holder, object_id) SELECT 'holder-' || i, 'n5' FROM n`,
		} {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return err
			}
		}
		return nil
	}))
	_, srv := serve(t, f.db, console.Config{})
	code, body := get(t, srv, objectPath("notes", "n5"), nil)
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, 100, strings.Count(body, `<li data-table="tags">`), "rows of tags listed")
	require.Contains(t, body, "More rows of tags keep it alive than the first 100 listed here")
	require.Contains(t, body, `id="holds-cut"`)
	require.Less(t, len(body), 200_000, "the page's size")
}

// item is an object whose id is a number: the id column is BIGINT.
type item struct {
	Key int64 `db:"id"`
}

func (i item) ID() int64 { return i.Key }

// A parameter no id or holder column can hold is the visitor's mistake: 400, on each
// store, never a 500 and an error in the operator's log.
func TestUnreadableParameters(t *testing.T) {
	testdb.Each(t, []testdb.Backend{testdb.SQLite, testdb.LibPQ}, func(t *testing.T, b testdb.Backend) {
		f := newFixture(t, b)
		require.NoError(t, refset.InTx(t.Context(), f.db, func(ctx context.Context, tx refset.Tx) error {
			_, err := tx.ExecContext(ctx, `CREATE TABLE items (id BIGINT PRIMARY KEY)`)
			return err
		}))
		_, err := store.NewStore[item, int64](t.Context(), f.db, store.Config{Table: "items"})
		require.NoError(t, err)
		logs := &strings.Builder{}
		h, err := console.New(t.Context(), f.db, console.Config{Logger: slog.New(slog.NewTextHandler(logs, nil))})
		require.NoError(t, err)
		srv := httptest.NewServer(h)
		t.Cleanup(func() {
			srv.Close()
			require.NoError(t, h.Close())
		})
		paths := []string{
			objectPath("notes", "\x00"), objectPath("notes", "n\x001"), objectPath("notes", "\xff"),
			"/holds?table=notes&holder=%00", "/holds?table=notes&holder=%ff",
			// No integer, on SQLite too, which keeps any value in any column: the id
			// is read as the key's type (cleanup.TextID), not compared loosely.
			objectPath("items", "abc"), objectPath("items", "99999999999999999999"), objectPath("items", "4.2"),
		}
		for _, p := range paths {
			code, body := get(t, srv, p, nil)
			require.Equal(t, http.StatusBadRequest, code, "%s: %s", p, body)
		}
		require.NotContains(t, logs.String(), "level=ERROR")
	})
}

// The object page reads its id as text of the set's key type (cleanup.TextID): on a
// set of integer IDs, id=42 is the object 42, its row and the rows that hold it,
// followed up a self-reference (the holder's key, read off Why's text, is an id as
// text too), on each store and driver; an id that is no integer is 400 and one no
// object has 404, on SQLite as on PostgreSQL.
func TestObjectPageOfIntegerKey(t *testing.T) {
	testdb.Each(t, []testdb.Backend{testdb.SQLite, testdb.LibPQ, testdb.Pgx}, func(t *testing.T, b testdb.Backend) {
		f := newFixture(t, b)
		require.NoError(t, refset.InTx(t.Context(), f.db, func(ctx context.Context, tx refset.Tx) error {
			_, err := tx.ExecContext(ctx, `CREATE TABLE items (id BIGINT PRIMARY KEY, parent BIGINT REFERENCES items (id))`)
			return err
		}))
		_, err := store.NewStore[item, int64](t.Context(), f.db, store.Config{Table: "items"})
		require.NoError(t, err)
		require.NoError(t, refset.InTx(t.Context(), f.db, func(ctx context.Context, tx refset.Tx) error {
			for _, q := range []string{
				`CREATE INDEX items_parent ON items (parent)`,
				`CREATE TABLE item_pins (pin TEXT PRIMARY KEY, item BIGINT NOT NULL REFERENCES items (id))`,
				`CREATE INDEX item_pins_item ON item_pins (item)`,
				`INSERT INTO items (id) VALUES (41)`,
				`INSERT INTO items (id, parent) VALUES (42, 41)`,
				`INSERT INTO item_pins (pin, item) VALUES ('pin-of-42', 42)`,
			} {
				if _, err := tx.ExecContext(ctx, q); err != nil {
					return err
				}
			}
			return nil
		}))
		logger, logs := testlog.New(slog.LevelInfo)
		_, srv := serve(t, f.db, console.Config{Logger: logger})
		code, body := get(t, srv, objectPath("items", "41"), nil)
		require.Equal(t, http.StatusOK, code, body)
		require.Contains(t, body, "items.parent", "41 is held by the item 42")
		require.Contains(t, body, "pin-of-42", "the graph follows 42 up to its pin")
		code, body = get(t, srv, objectPath("items", "42"), nil)
		require.Equal(t, http.StatusOK, code, body)
		require.Contains(t, body, "pin-of-42")
		for p, want := range map[string]int{
			objectPath("items", "43"):     http.StatusNotFound,
			objectPath("items", "abc"):    http.StatusBadRequest,
			objectPath("items", "obj-42"): http.StatusBadRequest,
		} {
			code, body := get(t, srv, p, nil)
			require.Equal(t, want, code, "%s: %s", p, body)
			if want == http.StatusBadRequest {
				require.Contains(t, html.UnescapeString(body), "cannot hold the id", p)
			}
		}
		require.NotContains(t, logs.String(), "level=ERROR")
	})
}

// On a database with no blockmanager, the chain page says there is no chain: 404, not
// a server error.
func TestNoChain(t *testing.T) {
	db := testdb.SQLite.Open(t, testdb.Options{})
	require.NoError(t, refset.InTx(t.Context(), db, func(ctx context.Context, tx refset.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE items (id BIGINT PRIMARY KEY)`)
		return err
	}))
	_, err := store.NewStore[item, int64](t.Context(), db, store.Config{Table: "items"})
	require.NoError(t, err)
	_, srv := serve(t, db, console.Config{})
	for _, p := range []string{"/chain", "/chain?table=blocks", "/chain?table=items"} {
		code, body := get(t, srv, p, nil)
		require.Equal(t, http.StatusNotFound, code, p)
		require.Contains(t, body, "no blockmanager chain in this database", p)
	}
}

// The holds page lists the first of each list and says when there are more: by
// holder, expiring soonest, expired, and one holder's.
func TestHoldsPageSaysWhenCut(t *testing.T) {
	f := newFixture(t, testdb.SQLite)
	require.NoError(t, refset.InTx(t.Context(), f.db, func(ctx context.Context, tx refset.Tx) error {
		for _, q := range []string{
			// 300 holders of n5: 150 expired, 150 expiring in an hour.
			`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300)
				INSERT INTO notes_holds (holder, object_id, expires_at)
				SELECT 'h' || i, 'n5', CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) + (CASE WHEN i % 2 = 0 THEN -1 ELSE 1 END) * 3600000 FROM n`,
			// 250 holds of dave.
			`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 250)
				INSERT INTO notes (id, body) SELECT 'd' || i, '' FROM n`,
			`INSERT INTO notes_holds (holder, object_id) SELECT 'dave', id FROM notes WHERE id LIKE 'd%'`,
		} {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return err
			}
		}
		return nil
	}))
	_, srv := serve(t, f.db, console.Config{})
	code, body := get(t, srv, "/holds?table=notes&holder=dave", nil)
	require.Equal(t, http.StatusOK, code, body)
	for _, list := range []string{"holders", "soonest", "expired", "of-holder"} {
		require.Contains(t, body, `id="`+list+`-cut"`, list)
	}
	code, body = get(t, srv, "/holds?table=notes&holder=alice", nil)
	require.Equal(t, http.StatusOK, code, body)
	require.NotContains(t, body, `id="of-holder-cut"`, "alice's one hold")
}

// On a database where no store was built yet the pages say there are no sets, as
// refset status does, instead of answering with an error.
func TestNoSetsYet(t *testing.T) {
	testdb.Each(t, []testdb.Backend{testdb.SQLite, testdb.LibPQ}, func(t *testing.T, b testdb.Backend) {
		_, srv := serve(t, b.Open(t, testdb.Options{}), console.Config{})
		for _, p := range []string{"/", "/holds"} {
			code, body := get(t, srv, p, nil)
			require.Equal(t, http.StatusOK, code, "%s: %s", p, body)
			require.Contains(t, body, `id="no-sets"`, p)
		}
	})
}

// A check reads the set's tables whole: another site's page may not start one (an
// <img> pointed at the console), and one runs at a time (429 for the others); the
// console's own pages, a typed address and a client that is no browser run it.
func TestCheckIsGuarded(t *testing.T) {
	f := newFixture(t, testdb.SQLite)
	_, srv := serve(t, f.db, console.Config{})
	for site, want := range map[string]int{
		"":            http.StatusOK,
		"same-origin": http.StatusOK,
		"none":        http.StatusOK,
		"same-site":   http.StatusForbidden,
		"cross-site":  http.StatusForbidden,
	} {
		code, body := get(t, srv, "/?check=notes", http.Header{"Sec-Fetch-Site": {site}})
		require.Equal(t, want, code, "Sec-Fetch-Site %q: %s", site, body)
	}

	require.NoError(t, refset.InTx(t.Context(), f.db, func(ctx context.Context, tx refset.Tx) error {
		_, err := tx.ExecContext(ctx, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50000)
			INSERT INTO notes (id, body) SELECT 'bulk' || i, '' FROM n`)
		return err
	}))
	codes := make(chan int, 8)
	start := make(chan struct{})
	for range cap(codes) {
		go func() {
			<-start
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/?check=notes", nil)
			resp, err := srv.Client().Do(req)
			if err != nil {
				codes <- 0
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	close(start)
	seen := map[int]int{}
	for range cap(codes) {
		seen[<-codes]++
	}
	require.Equal(t, cap(codes), seen[http.StatusOK]+seen[http.StatusTooManyRequests], "every check ran or was turned away: %v", seen)
	require.Positive(t, seen[http.StatusOK], "%v", seen)
	require.Positive(t, seen[http.StatusTooManyRequests], "checks at once: %v", seen)
}

// /static/ serves the console's files, and no listing of them.
func TestStaticFilesOnly(t *testing.T) {
	f := newFixture(t, testdb.SQLite)
	_, srv := serve(t, f.db, console.Config{})
	code, _ := get(t, srv, "/static/console.css", nil)
	require.Equal(t, http.StatusOK, code)
	code, body := get(t, srv, "/static/", nil)
	require.Equal(t, http.StatusNotFound, code)
	require.NotContains(t, body, "console.css")
}

// Many visitors at once, while the sampler samples: every page answers as it does
// alone (a check may be turned away while another runs), on each store.
func TestConcurrentPages(t *testing.T) {
	testdb.Each(t, []testdb.Backend{testdb.SQLite, testdb.LibPQ}, func(t *testing.T, b testdb.Backend) {
		f := newFixture(t, b)
		_, srv := serve(t, f.db, console.Config{SampleEvery: time.Second})
		type answer struct {
			path string
			code int
		}
		const visitors = 12
		answers := make(chan answer, visitors*len(pages)*2)
		var wg sync.WaitGroup
		for v := range visitors {
			wg.Go(func() {
				for i := range 2 * len(pages) {
					p := pages[(v+i)%len(pages)]
					req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+p, nil)
					if err != nil {
						answers <- answer{p, 0}
						continue
					}
					resp, err := srv.Client().Do(req)
					if err != nil {
						answers <- answer{p, 0}
						continue
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					answers <- answer{p, resp.StatusCode}
				}
			})
		}
		wg.Wait()
		close(answers)
		for a := range answers {
			if a.path == "/?check=notes" && a.code == http.StatusTooManyRequests {
				continue
			}
			require.Equal(t, http.StatusOK, a.code, a.path)
		}
	})
}
