package pgtest

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// proxyDrivers are the database/sql drivers refset runs on; the proxy must cut both
// the same way, though they send a statement in different messages.
var proxyDrivers = []string{"pgx", "postgres"}

// proxied starts a proxy to a schema of its own, with a table t, and opens it with
// driver.
func proxied(t *testing.T, driver string) (*Proxy, *sql.DB) {
	t.Helper()
	proxy, dsn := NewProxy(t, DSN(t))
	db, err := sql.Open(driver, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = db.ExecContext(t.Context(), `CREATE TABLE t (v text NOT NULL)`)
	require.NoError(t, err)
	return proxy, db
}

// eventuallyHolds waits until t holds the row v: a statement the proxy cut runs on
// in the server.
func eventuallyHolds(t *testing.T, db *sql.DB, v string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM t WHERE v = $1`, v).Scan(&n)
		return err == nil && n == 1
	}, 10*time.Second, 10*time.Millisecond, "the server ran the statement the proxy cut: %s", v)
}

// TestProxyCutAfterSentNeverLetsTheReplyThrough: a connection CutAfterSent or
// CutAfterCommitSent ends never answers its client, however fast the server is,
// while the server runs the statement to its end: a test that arms either must see
// the loss every time. Each iteration is a new connection, the last one's lost.
func TestProxyCutAfterSentNeverLetsTheReplyThrough(t *testing.T) {
	const iterations = 200
	for _, driver := range proxyDrivers {
		t.Run(driver, func(t *testing.T) {
			t.Run("CutAfterSent", func(t *testing.T) {
				proxy, db := proxied(t, driver)
				db.SetMaxIdleConns(0) // a connection whose answer came through is not used again
				ctx := t.Context()
				answered := 0
				for i := range iterations {
					// One connection, no retry on another: database/sql sends a
					// statement again when lib/pq calls a lost connection bad.
					conn, err := db.Conn(ctx)
					require.NoError(t, err)
					v := fmt.Sprintf("sent-%d", i)
					proxy.CutAfterSent(v) // in the statement's argument
					if _, err := conn.ExecContext(ctx, `INSERT INTO t (v) VALUES ($1)`, v); err == nil {
						answered++
					}
					conn.Close()
				}
				assert.Zero(t, answered, "statements whose client heard their answer, of %d", iterations)
				eventuallyHolds(t, db, fmt.Sprintf("sent-%d", iterations-1))
			})
			t.Run("CutAfterCommitSent", func(t *testing.T) {
				proxy, db := proxied(t, driver)
				db.SetMaxIdleConns(0)
				ctx := t.Context()
				answered := 0
				for i := range iterations {
					tx, err := db.BeginTx(ctx, nil)
					require.NoError(t, err)
					_, err = tx.ExecContext(ctx, `INSERT INTO t (v) VALUES ($1)`, fmt.Sprintf("c-%d", i))
					require.NoError(t, err)
					proxy.CutAfterCommitSent()
					if tx.Commit() == nil {
						answered++
					}
				}
				assert.Zero(t, answered, "COMMITs whose client heard their answer, of %d", iterations)
				eventuallyHolds(t, db, fmt.Sprintf("c-%d", iterations-1))
			})
		})
	}
}

// TestProxyCommitMatchesOnlyCommit: CutAfterCommitSent and CutCommitReply wait for
// a statement that is COMMIT (or END), however spelt, and let pass every other,
// whatever it names commit: a table, a string, an argument.
func TestProxyCommitMatchesOnlyCommit(t *testing.T) {
	arms := map[string]func(*Proxy){"CutAfterCommitSent": (*Proxy).CutAfterCommitSent, "CutCommitReply": (*Proxy).CutCommitReply}
	notCommits := []struct {
		sql  string
		args []any
	}{
		{sql: `CREATE TABLE IF NOT EXISTS commits (v text)`},
		{sql: `INSERT INTO commits (v) VALUES ('commit')`},
		{sql: `INSERT INTO commits (v) VALUES ($1)`, args: []any{"COMMIT"}},
		{sql: `SELECT count(*) FROM commits WHERE v <> 'end'`},
		{sql: `-- commit
		       SELECT 1`},
	}
	for _, driver := range proxyDrivers {
		for name, arm := range arms {
			t.Run(driver+"/"+name, func(t *testing.T) {
				proxy, db := proxied(t, driver)
				ctx := t.Context()
				for i, commit := range []string{"COMMIT", "commit;", "END", " End Transaction ; ", "COMMIT WORK", "end\n\twork"} {
					conn, err := db.Conn(ctx)
					require.NoError(t, err)
					_, err = conn.ExecContext(ctx, `BEGIN`)
					require.NoError(t, err)
					arm(proxy)
					for _, s := range notCommits {
						_, err := conn.ExecContext(ctx, s.sql, s.args...)
						require.NoError(t, err, "%s is not a COMMIT", s.sql)
					}
					v := fmt.Sprintf("commit-%d", i)
					_, err = conn.ExecContext(ctx, `INSERT INTO t (v) VALUES ($1)`, v)
					require.NoError(t, err)
					_, err = conn.ExecContext(ctx, commit)
					require.Error(t, err, "%q is a COMMIT", commit)
					conn.Close()
					eventuallyHolds(t, db, v)
				}
			})
		}
	}
}

// TestProxyCutsAStatementRunAgain: a statement prepared before the proxy was armed
// (pgx's statement cache, a database/sql Stmt), then run again by its name alone, is
// cut as the first run would have been, and only once it ran: its text is in the
// Parse its connection sent earlier, not in the messages that run it.
func TestProxyCutsAStatementRunAgain(t *testing.T) {
	arms := map[string]func(p *Proxy, needle string){"CutAfterSent": (*Proxy).CutAfterSent, "CutReplyTo": (*Proxy).CutReplyTo}
	for _, driver := range proxyDrivers {
		for name, arm := range arms {
			t.Run(driver+"/"+name, func(t *testing.T) {
				proxy, db := proxied(t, driver)
				ctx := t.Context()
				conn, err := db.Conn(ctx)
				require.NoError(t, err)
				defer conn.Close()
				const insert = `INSERT INTO t (v) VALUES ($1)`
				run := func(v string) error {
					_, err := conn.ExecContext(ctx, insert, v) // pgx prepares it once, in its cache
					return err
				}
				if driver == "postgres" {
					stmt, err := conn.PrepareContext(ctx, insert) // lib/pq prepares when asked
					require.NoError(t, err)
					run = func(v string) error {
						_, err := stmt.ExecContext(ctx, v)
						return err
					}
				}
				require.NoError(t, run("unarmed"))
				arm(proxy, "insert into t") // the text, in any case
				require.Error(t, run("armed"), "cut")
				eventuallyHolds(t, db, "armed")
			})
		}
	}
}

// TestProxyCutsAStatementOnceItRuns: lib/pq prepares a statement with arguments in a
// round trip of its own (Parse, Describe, Sync) before it runs it (Bind, Execute,
// Sync): the proxy cuts after the second, so the statement runs, as promised.
func TestProxyCutsAStatementOnceItRuns(t *testing.T) {
	arms := map[string]func(p *Proxy, needle string){"CutAfterSent": (*Proxy).CutAfterSent, "CutReplyTo": (*Proxy).CutReplyTo}
	for name, arm := range arms {
		t.Run(name, func(t *testing.T) {
			proxy, db := proxied(t, "postgres")
			ctx := t.Context()
			conn, err := db.Conn(ctx)
			require.NoError(t, err)
			defer conn.Close()
			arm(proxy, "INSERT INTO t")
			_, err = conn.ExecContext(ctx, `INSERT INTO t (v) VALUES ($1)`, "ran")
			require.Error(t, err, "cut")
			eventuallyHolds(t, db, "ran")
		})
	}
}

// TestProxyForgetsAClosedStatement: a statement closed (pgx's Deallocate) is gone;
// another of its name, prepared in SQL, is not taken for it.
func TestProxyForgetsAClosedStatement(t *testing.T) {
	proxy, dsn := NewProxy(t, DSN(t))
	ctx := t.Context()
	conn, err := pgconn.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Prepare(ctx, "s", `SELECT 'needle'`, nil)
	require.NoError(t, err)
	require.NoError(t, conn.Deallocate(ctx, "s"))
	_, err = conn.Exec(ctx, `PREPARE s AS SELECT 1`).ReadAll()
	require.NoError(t, err)
	proxy.CutAfterSent("needle")
	res := conn.ExecPrepared(ctx, "s", nil, nil, nil).Read()
	require.NoError(t, res.Err, "s is SELECT 1 now")
	require.True(t, proxy.Disarm(), "no statement took the arming")
}

// TestProxyDropsWhatTheServerHadNotSent: CutReplyTo drops the answers of its round
// trip that the server had not sent when the statement ran. PostgreSQL sends a
// round trip's answers at its Sync, or at a Flush message: without a Flush the
// answer to a statement before the cut one is lost with it (a test must not learn
// from the proxy what a crash would have kept from it); after a Flush it arrives.
func TestProxyDropsWhatTheServerHadNotSent(t *testing.T) {
	for _, flush := range []bool{false, true} {
		t.Run(fmt.Sprintf("flush=%v", flush), func(t *testing.T) {
			proxy, dsn := NewProxy(t, DSN(t))
			ctx := t.Context()
			conn, err := pgconn.Connect(ctx, dsn)
			require.NoError(t, err)
			defer conn.Close(context.Background())
			proxy.CutReplyTo("needle")
			p := conn.StartPipeline(ctx)
			p.SendQueryParams(`SELECT 'first'`, nil, nil, nil, nil)
			if flush {
				p.SendFlushRequest()
			}
			p.SendQueryParams(`SELECT 'needle'`, nil, nil, nil, nil)
			require.NoError(t, p.Sync())
			res, err := p.GetResults()
			if !flush {
				require.Error(t, err, "the first answer is lost with the cut one")
				return
			}
			require.NoError(t, err)
			rows, err := res.(*pgconn.ResultReader).Close()
			require.NoError(t, err, "the first answer was flushed before the cut one ran")
			assert.Equal(t, "SELECT 1", rows.String())
			_, err = p.GetResults()
			require.Error(t, err, "the cut one's answer is lost")
		})
	}
}

// armedTB is a testing.TB whose cleanups and errors the test reads itself.
type armedTB struct {
	testing.TB
	cleanups []func()
	errors   []string
}

func (tb *armedTB) Cleanup(f func())          { tb.cleanups = append(tb.cleanups, f) }
func (tb *armedTB) Errorf(f string, a ...any) { tb.errors = append(tb.errors, fmt.Sprintf(f, a...)) }
func (tb *armedTB) Failed() bool              { return len(tb.errors) > 0 }

// TestProxyStillArmedFailsTheTest: a test whose arming no statement took fails,
// saying what was armed; one that disarmed, or whose arming was taken, does not.
func TestProxyStillArmedFailsTheTest(t *testing.T) {
	cases := []struct {
		name string
		use  func(t *testing.T, p *Proxy, db *sql.DB)
		want string // in the error; "" for none
	}{
		{"untaken", func(t *testing.T, p *Proxy, db *sql.DB) { p.CutCommitReply() },
			"the proxy was armed to drop the server's answer to the next COMMIT, and no statement took it"},
		{"untaken needle", func(t *testing.T, p *Proxy, db *sql.DB) { p.CutAfterSent("never sent") },
			`the proxy was armed to cut the client of the next statement holding "never sent" off`},
		{"disarmed", func(t *testing.T, p *Proxy, db *sql.DB) {
			p.CutCommitReply()
			assert.True(t, p.Disarm())
			assert.False(t, p.Disarm(), "nothing left to take back")
		}, ""},
		{"taken", func(t *testing.T, p *Proxy, db *sql.DB) {
			p.CutReplyTo("SELECT 'taken'")
			_, err := db.ExecContext(t.Context(), `SELECT 'taken', $1::int`, 1)
			require.Error(t, err, "cut")
			assert.False(t, p.Disarm(), "the statement took the arming")
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tb := &armedTB{TB: t}
			proxy, dsn := NewProxy(tb, DSN(t))
			db, err := sql.Open("pgx", dsn)
			require.NoError(t, err)
			tc.use(t, proxy, db)
			db.Close()
			for i := len(tb.cleanups) - 1; i >= 0; i-- {
				tb.cleanups[i]()
			}
			if tc.want == "" {
				assert.Empty(t, tb.errors)
				return
			}
			require.Len(t, tb.errors, 1)
			assert.Contains(t, tb.errors[0], tc.want)
		})
	}
}

// The proxy's close (its test's cleanup) closes a connection it accepted while it was
// closing (closeWhileAccepting): before, one that registered after close closed the
// connections it knew was left open, and close waited until its client hung up.
func TestProxyCloseWhileAccepting(t *testing.T) {
	closeWhileAccepting(t, func(ln net.Listener, target string, dialed func()) (*forwarder, func()) {
		p := startProxy(t, ln, target, dialed)
		return &p.forwarder, p.close
	})
}
