package console_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/refsetdb/refset/console"
	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/internal/test/testlog"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/stretchr/testify/require"
)

// Without a token, the console answers a request to a loopback host however its
// Host header spells it: DNS names compare without regard to case, localhost. is
// localhost fully qualified, an IPv6 literal comes in brackets, and the port may be
// missing. Any other name, localhost's subdomains among them, reads nothing.
func TestLoopbackHostSpellings(t *testing.T) {
	h, srv := serve(t, testdb.SQLite.Open(t, testdb.Options{}), console.Config{})
	loopback := []string{"localhost:8080", "LOCALHOST:8080", "Localhost", "localHOST.", "localhost.:8080",
		"[::1]", "[::1]:8080", "[0:0:0:0:0:0:0:1]:8080", "[::ffff:127.0.0.1]:8080", "127.0.0.1", "127.0.0.1:8080",
		"[127.0.0.1]:8080"} // no IPv6 literal, but loopback all the same
	others := []string{"localhost..", ".localhost", "attacker.localhost:8080", "localhost.attacker.example.",
		"LOCALHOST.ATTACKER.EXAMPLE", "127.0.0.1." /* a name, not the address */, "[::1", "[::2]:8080", "[::]:8080",
		"0.0.0.0:8080", "" /* HTTP/1.0 without a Host */}
	type hostCase struct {
		host string
		want int
	}
	var cases []hostCase
	for _, host := range loopback {
		cases = append(cases, hostCase{host, http.StatusOK})
	}
	for _, host := range others {
		cases = append(cases, hostCase{host, http.StatusForbidden})
	}
	for _, tc := range cases {
		t.Run(tc.host, func(t *testing.T) {
			var code int
			if tc.host == "" { // a client always sends one: ask the handler itself
				req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/", nil)
				req.Host = ""
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				code = rec.Code
			} else {
				code, _ = get(t, srv, "/", http.Header{"Host": {tc.host}})
			}
			require.Equal(t, tc.want, code)
		})
	}
}

// CheckAddr takes the loopback names as the Host check does.
func TestCheckAddrSpellings(t *testing.T) {
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"LOCALHOST:8080", true},
		{"localhost.:8080", true},
		{"[::1]:0", true},
		{"attacker.localhost:8080", false},
		{"localhost..:8080", false},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			err := console.CheckAddr(tc.addr, "")
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, refset.ErrInvalidConfig)
			}
		})
	}
}

// A request that ended before its page was read is no server error, on a real server
// and a real database: one whose deadline passed (a handler around the console set
// it) is 503 and a warning; one whose client went away is a debug line. Neither is a
// 500 nor an error in the operator's log. On PostgreSQL the page's statement is under
// way when the request ends (it waits for a lock on the set's table), and the driver
// cancels it.
func TestEndedRequestIsNoServerError(t *testing.T) {
	testdb.Each(t, []testdb.Backend{testdb.SQLite, testdb.LibPQ, testdb.Pgx}, func(t *testing.T, b testdb.Backend) {
		f := newFixture(t, b)
		for _, tc := range []struct {
			name     string
			deadline time.Duration // 0: the client goes away instead
			level    string
		}{
			{"deadline passed", 300 * time.Millisecond, "level=WARN"},
			{"client gone", 0, "level=DEBUG"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				logger, logs := testlog.New(slog.LevelDebug)
				h, err := console.New(t.Context(), f.db, console.Config{Logger: logger})
				require.NoError(t, err)
				t.Cleanup(func() { require.NoError(t, h.Close()) })
				started, served := make(chan struct{}), make(chan struct{})
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					defer close(served)
					ctx := r.Context()
					if tc.deadline > 0 {
						var cancel context.CancelFunc
						ctx, cancel = context.WithTimeout(ctx, tc.deadline)
						defer cancel()
					}
					close(started)
					if !b.Postgres {
						// SQLite's reads wait for no lock: the request ends before the
						// page reads.
						<-ctx.Done()
					}
					h.ServeHTTP(w, r.WithContext(ctx))
				}))
				t.Cleanup(srv.Close)
				if b.Postgres {
					release := lockTable(t, f, "notes")
					defer release()
				}

				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+objectPath("notes", "n1"), nil)
				require.NoError(t, err)
				type answer struct {
					code int
					body string
					err  error
				}
				answered := make(chan answer, 1)
				go func() {
					resp, err := srv.Client().Do(req)
					if err != nil {
						answered <- answer{err: err}
						return
					}
					defer resp.Body.Close()
					body, err := io.ReadAll(resp.Body)
					answered <- answer{resp.StatusCode, string(body), err}
				}()
				<-started
				if tc.deadline == 0 {
					if b.Postgres {
						waitForLock(t, f)
					}
					cancel()
				}
				a := <-answered
				<-served
				if tc.deadline > 0 {
					require.NoError(t, a.err)
					require.Equal(t, http.StatusServiceUnavailable, a.code, a.body)
					require.Contains(t, a.body, "deadline")
				} else {
					require.ErrorIs(t, a.err, context.Canceled)
				}
				require.NotContains(t, logs.String(), "level=ERROR")
				require.Contains(t, logs.String(), tc.level+` msg="refset console: `)
			})
		}
	})
}

// lockTable takes an ACCESS EXCLUSIVE lock on table in f's schema until release, which
// the test must call before it ends.
func lockTable(tb testing.TB, f fixture, table string) (release func()) {
	tb.Helper()
	tx, err := f.db.(*postgres.DB).Pool().BeginTx(tb.Context(), nil)
	require.NoError(tb, err)
	_, err = tx.ExecContext(tb.Context(), `LOCK TABLE `+pq.QuoteIdentifier(f.place.Schema)+`.`+pq.QuoteIdentifier(table)+` IN ACCESS EXCLUSIVE MODE`)
	require.NoError(tb, err)
	return func() { require.NoError(tb, tx.Rollback()) }
}

// waitForLock waits until a statement on f's database waits for a lock.
func waitForLock(tb testing.TB, f fixture) {
	tb.Helper()
	pool := f.db.(*postgres.DB).Pool()
	require.Eventually(tb, func() bool {
		var n int
		err := pool.QueryRowContext(tb.Context(), `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`).Scan(&n)
		return err == nil && n > 0
	}, 10*time.Second, 20*time.Millisecond)
}

// Hostile requests get a plain answer, never a server error: methods other than GET
// and HEAD, parameters repeated, empty, long or malformed, and paths no page has.
func TestHostileRequests(t *testing.T) {
	f := newFixture(t, testdb.SQLite)
	logger, logs := testlog.New(slog.LevelInfo)
	_, srv := serve(t, f.db, console.Config{Logger: logger})
	long := strings.Repeat("a", 100_000)
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{http.MethodOptions, "/", http.StatusMethodNotAllowed},
		{http.MethodTrace, "/", http.StatusMethodNotAllowed},
		{"PROPFIND", "/", http.StatusMethodNotAllowed},
		{"get", "/", http.StatusMethodNotAllowed}, // methods are case-sensitive
		{http.MethodHead, "/", http.StatusOK},
		{http.MethodHead, "/?check=notes", http.StatusOK},
		{http.MethodGet, "/" + long, http.StatusNotFound},
		{http.MethodGet, "/object/" + long, http.StatusNotFound},
		{http.MethodGet, "/?check=" + long, http.StatusBadRequest},
		{http.MethodGet, "/holds?table=notes&holder=" + long, http.StatusOK},
		{http.MethodGet, objectPath("notes", long), http.StatusNotFound},
		{http.MethodGet, "/object?table=notes&id=n1&id=n2&table=blocks", http.StatusOK},  // the first of each
		{http.MethodGet, "/?check=notes;x", http.StatusOK},                               // no such parameter: a semicolon separates none
		{http.MethodGet, "/?page=-1&page=99999999999999999999999&page=x", http.StatusOK}, // no page takes one
		{http.MethodGet, "/object?table=notes&id=%zz", http.StatusBadRequest},
		{http.MethodGet, "/object?table=blocks&id=-1", http.StatusNotFound},
		{http.MethodGet, "/object?table=" + strings.Repeat("a.", 1000) + "&id=1", http.StatusBadRequest},
		{http.MethodGet, "/static/", http.StatusNotFound},
		{http.MethodGet, "/static/%2e%2e/templates/layout.html", http.StatusNotFound},
	} {
		t.Run(tc.method+" "+tc.path[:min(len(tc.path), 60)], func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), tc.method, srv.URL+tc.path, nil)
			require.NoError(t, err)
			resp, err := srv.Client().Do(req)
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			require.Equal(t, tc.want, resp.StatusCode)
			if tc.want == http.StatusMethodNotAllowed {
				require.Equal(t, "GET, HEAD", resp.Header.Get("Allow"))
			}
		})
	}
	require.NotContains(t, logs.String(), "level=ERROR")
}

// Visitors keep asking while the database closes under the console: each answer is
// a page or a server error, never a hang, a panic or a race.
func TestConcurrentRequestsWhileDatabaseCloses(t *testing.T) {
	testdb.Each(t, []testdb.Backend{testdb.SQLite, testdb.LibPQ}, func(t *testing.T, b testdb.Backend) {
		f := newFixture(t, b)
		_, srv := serve(t, f.db, console.Config{SampleEvery: time.Second})
		const visitors = 8
		var wg sync.WaitGroup
		codes := make(chan int, visitors*len(pages)*3)
		for v := range visitors {
			wg.Go(func() {
				for i := range 3 * len(pages) {
					// Not get, whose require may not stop the test from here.
					resp, err := srv.Client().Get(srv.URL + pages[(v+i)%len(pages)])
					if err != nil {
						codes <- 0
						continue
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					codes <- resp.StatusCode
				}
			})
		}
		time.Sleep(50 * time.Millisecond)
		require.NoError(t, f.db.Close())
		wg.Wait()
		close(codes)
		for code := range codes {
			require.Contains(t, []int{http.StatusOK, http.StatusTooManyRequests, http.StatusInternalServerError}, code)
		}
		code, _ := get(t, srv, "/", nil)
		require.Equal(t, http.StatusInternalServerError, code, "the database is closed")
	})
}
