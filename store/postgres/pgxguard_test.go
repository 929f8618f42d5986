package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pgxPoolKind makes a pgx pool on a DSN: Open's, or a caller's.
type pgxPoolKind struct {
	name string
	open func(t *testing.T, dsn string) *sql.DB
}

// guardedPgxPools are the pgx pools that never run a statement again after its
// connection was lost once it was sent: Open's, and the caller's of
// NewPgxConnector and NewPgxPoolConnector.
var guardedPgxPools = []pgxPoolKind{
	{"Open", func(t *testing.T, dsn string) *sql.DB {
		return openWith(t, dsn, Options{Driver: DriverPgx}).Pool().DB
	}},
	{"NewPgxConnector", func(t *testing.T, dsn string) *sql.DB {
		cfg, err := pgx.ParseConfig(dsn)
		require.NoError(t, err)
		pool := sql.OpenDB(NewPgxConnector(cfg))
		t.Cleanup(func() { pool.Close() })
		return pool
	}},
	{"NewPgxPoolConnector", func(t *testing.T, dsn string) *sql.DB {
		pp, err := pgxpool.New(t.Context(), dsn)
		require.NoError(t, err)
		pool := sql.OpenDB(NewPgxPoolConnector(pp))
		pool.SetMaxIdleConns(0)
		t.Cleanup(func() { pool.Close(); pp.Close() })
		return pool
	}},
}

// pgxModes are the DSN settings under which pgx sends statements: its default (the
// simple protocol for an Exec without arguments only), and the simple protocol for
// every statement.
var pgxModes = []struct{ name, mode string }{{"default", ""}, {"simple_protocol", "simple_protocol"}}

// inMode is dsn with pgx's default_query_exec_mode set to mode, unless it is "".
func inMode(t *testing.T, dsn, mode string) string {
	if mode == "" {
		return dsn
	}
	return pgtest.WithParam(t, dsn, "default_query_exec_mode", mode)
}

// TestPgxLostAnswerRunsOnce: a statement outside a transaction whose answer is lost
// once the server ran it (the proxy drops the answer and ends the connection) fails
// with ErrUnavailable and runs once, on every guarded pgx pool, with and without
// arguments, in pgx's default mode and in simple_protocol. Without the guard, pgx
// reports a statement sent in the simple protocol (one without arguments, or any in
// simple_protocol mode) as safe to retry, and database/sql runs it again: two rows.
func TestPgxLostAnswerRunsOnce(t *testing.T) {
	statements := []struct {
		name string
		run  func(ctx context.Context, pool *sql.DB) error
	}{
		{"Exec without arguments", func(ctx context.Context, pool *sql.DB) error {
			_, err := pool.ExecContext(ctx, `INSERT INTO t VALUES ('x')`)
			return err
		}},
		{"Exec with an argument", func(ctx context.Context, pool *sql.DB) error {
			_, err := pool.ExecContext(ctx, `INSERT INTO t VALUES ($1)`, "x")
			return err
		}},
		{"Query with an argument", func(ctx context.Context, pool *sql.DB) error {
			var v string
			return pool.QueryRowContext(ctx, `INSERT INTO t VALUES ($1) RETURNING v`, "x").Scan(&v)
		}},
		{"prepared, without arguments", func(ctx context.Context, pool *sql.DB) error {
			st, err := pool.PrepareContext(ctx, `INSERT INTO t VALUES ('x')`)
			if err != nil {
				return err
			}
			defer st.Close()
			_, err = st.ExecContext(ctx)
			return err
		}},
	}
	for _, kind := range guardedPgxPools {
		for _, m := range pgxModes {
			for _, st := range statements {
				t.Run(kind.name+"/"+m.name+"/"+st.name, func(t *testing.T) {
					ctx := t.Context()
					proxy, through := pgtest.NewProxy(t, pgtest.DSN(t))
					pool := kind.open(t, inMode(t, through, m.mode))
					_, err := pool.ExecContext(ctx, `CREATE TABLE t (v text)`)
					require.NoError(t, err)

					proxy.CutReplyTo("INSERT INTO t")
					err = st.run(ctx, pool)
					assert.False(t, proxy.Disarm(), "the statement was sent, and its answer lost")
					require.Error(t, err, "the answer was lost")
					assert.NotErrorIs(t, err, driver.ErrBadConn, "which database/sql would have run again")
					assert.ErrorIs(t, translateError(err, ""), refset.ErrUnavailable, "%v", err)
					var n int
					require.NoError(t, pool.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&n))
					assert.Equal(t, 1, n, "the statement ran once")
				})
			}
		}
	}
}

// TestPgxGuardKeepsRetryWhereNothingWasSent: the guard leaves database/sql's retry
// to what was not sent. A connection the server ended while it was idle is found
// dead before the statement (stdlib pings a connection idle for over a second), and
// the statement runs, once, on a new one; a statement on a connection pgx knew
// closed, or with a context already ended, stays stdlib's driver.ErrBadConn.
func TestPgxGuardKeepsRetryWhereNothingWasSent(t *testing.T) {
	for _, kind := range guardedPgxPools {
		t.Run(kind.name, func(t *testing.T) {
			ctx := t.Context()
			dsn := pgtest.DSN(t)
			admin := openWith(t, dsn, Options{})
			pool := kind.open(t, dsn)
			pool.SetMaxOpenConns(1)
			_, err := pool.ExecContext(ctx, `CREATE TABLE t (v text)`)
			require.NoError(t, err)
			var ended, now int
			require.NoError(t, pool.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&ended))
			var gone bool
			require.NoError(t, admin.Pool().QueryRowContext(ctx, `SELECT pg_terminate_backend($1, 5000)`, ended).Scan(&gone))
			require.True(t, gone)
			time.Sleep(1100 * time.Millisecond) // past stdlib's second without a ping

			_, err = pool.ExecContext(ctx, `INSERT INTO t VALUES ('x')`)
			require.NoError(t, err, "run on a new connection")
			require.NoError(t, pool.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&now))
			assert.Equal(t, 1, now, "once")
			require.NoError(t, pool.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&now))
			assert.NotEqual(t, ended, now, "on another session")
		})
	}

	cases := []struct {
		name  string
		spoil func(t *testing.T, c *pgx.Conn) context.Context // before the statement
	}{
		{"pgx closed the connection", func(t *testing.T, c *pgx.Conn) context.Context {
			require.NoError(t, c.Close(t.Context()))
			return t.Context()
		}},
		{"the context had ended", func(t *testing.T, _ *pgx.Conn) context.Context {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			return ctx
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := pgx.ParseConfig(pgtest.DSN(t))
			require.NoError(t, err)
			dc, err := NewPgxConnector(cfg).Connect(t.Context())
			require.NoError(t, err)
			defer dc.Close()
			g := dc.(*pgxGuardedConn)
			ctx := tc.spoil(t, g.Conn())
			_, err = g.ExecContext(ctx, `SELECT 1`, nil)
			assert.Equal(t, driver.ErrBadConn, err, "nothing was sent: database/sql may run it elsewhere")
			_, err = g.QueryContext(ctx, `SELECT 1`, nil)
			assert.Equal(t, driver.ErrBadConn, err)
		})
	}
}

// TestPgxOwnStatementLostIsSettled: a statement that commits on its own
// (refsetdriver.OwnCommits, as custody's payments) whose answer is lost once the
// server committed it is settled as committed, not reported as not committed, on
// pgx in simple_protocol mode, where pgx calls the loss safe to retry: on Open's
// pool, whose guard says otherwise, and on a caller's pool without the guard
// (stdlib.OpenDB), where refset itself takes pgx's word only for a connection that
// was closed before the statement.
func TestPgxOwnStatementLostIsSettled(t *testing.T) {
	pools := append([]pgxPoolKind{{"stdlib.OpenDB", func(t *testing.T, dsn string) *sql.DB {
		cfg, err := pgx.ParseConfig(dsn)
		require.NoError(t, err)
		pool := stdlib.OpenDB(*cfg)
		t.Cleanup(func() { pool.Close() })
		return pool
	}}}, guardedPgxPools...)
	statements := []struct {
		name, query string
		args        []any
	}{
		{"with an argument", `INSERT INTO items (id) VALUES ($1) RETURNING id`, []any{"paid"}},
		{"without arguments", `INSERT INTO items (id) VALUES ('paid') RETURNING id`, nil},
	}
	for _, kind := range pools {
		t.Run(kind.name, func(t *testing.T) {
			for _, st := range statements {
				t.Run(st.name, func(t *testing.T) {
					ctx := t.Context()
					proxy, through := pgtest.NewProxy(t, pgtest.DSN(t))
					dsn := inMode(t, through, "simple_protocol")
					var db *DB
					if kind.name == "Open" {
						db = openWith(t, dsn, Options{Driver: DriverPgx, ResolveCommitWait: 5 * time.Second})
					} else {
						var err error
						db, err = New(ctx, kind.open(t, dsn), Options{ResolveCommitWait: 5 * time.Second})
						require.NoError(t, err)
						t.Cleanup(func() { db.Close() })
					}
					_, err := db.Pool().ExecContext(ctx, `CREATE TABLE items (id text PRIMARY KEY)`)
					require.NoError(t, err)

					own := db.Driver().(refsetdriver.OwnCommits)
					proxy.CutReplyTo("INSERT INTO items")
					err = own.QueryOwn(ctx, st.query, st.args, func(*sql.Rows) error { return nil },
						func(ctx context.Context, tx refsetdriver.Tx) (bool, error) {
							var n int
							err := tx.QueryRowContext(ctx, `SELECT count(*) FROM items WHERE id = 'paid'`).Scan(&n)
							return n == 1, err
						})
					assert.False(t, proxy.Disarm(), "the statement was sent, and its answer lost")
					require.NoError(t, err, "settled: it committed")
					assert.Equal(t, 1, count(t, db, `SELECT count(*) FROM items`))
				})
			}
		})
	}
}

// TestNewWarnsOfUnguardedPgxPool: New takes a caller's pgx pool without the guard
// (pgxpool users cannot change theirs), and warns, once, of what it does to the
// caller's own statements; a pool of NewPgxConnector's it takes silently.
func TestNewWarnsOfUnguardedPgxPool(t *testing.T) {
	dsn := pgtest.DSN(t)
	cfg, err := pgx.ParseConfig(dsn)
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		pool  func() *sql.DB
		warns bool
	}{
		{"stdlib.OpenDB", func() *sql.DB { return stdlib.OpenDB(*cfg) }, true},
		{"NewPgxConnector", func() *sql.DB { return sql.OpenDB(NewPgxConnector(cfg)) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := newLogRecorder()
			pool := tc.pool()
			t.Cleanup(func() { pool.Close() })
			db, err := New(t.Context(), pool, Options{Options: store.Options{Logger: logs.logger()}})
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() })
			var warnings []string
			for _, rec := range logs.records() {
				if msg, _ := rec["msg"].(string); rec["level"] == "WARN" && strings.Contains(msg, "pgx pool given to New has no guard") {
					warnings = append(warnings, msg)
				}
			}
			if tc.warns {
				assert.Len(t, warnings, 1)
			} else {
				assert.Empty(t, warnings)
			}
		})
	}
}
