package console_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"html"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/console"
	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/internal/test/testlog"
	"github.com/refsetdb/refset/refset"
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
