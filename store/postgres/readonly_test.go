package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStandbyConnectionsAreDropped: a pool Open made on a server that takes no
// writes (a demoted primary restarted as a standby, reached through an address that
// still leads to it) fails each unit of work that writes with ErrUnavailable, never
// ErrCommitUnknown, writing nothing, and drops the connection, so that the next dials
// again (and a multi-host DSN would find the new primary): the backend serving the
// pool changes. lib/pq's BEGIN READ WRITE is refused there, pgx's INSERT.
func TestStandbyConnectionsAreDropped(t *testing.T) {
	forEachDriver(t, func(t *testing.T, driver string) {
		primaryDSN, standbyDSN, _ := pgtest.NewWithStandby(t)
		primary := openWith(t, primaryDSN, Options{Driver: driver})
		ctx := t.Context()
		_, err := primary.Pool().ExecContext(ctx, `CREATE TABLE items (id text PRIMARY KEY)`)
		require.NoError(t, err)
		standby, err := sql.Open("postgres", standbyDSN)
		require.NoError(t, err)
		t.Cleanup(func() { standby.Close() })
		require.Eventually(t, func() bool {
			var n int
			return standby.QueryRowContext(ctx, `SELECT count(*) FROM items`).Scan(&n) == nil
		}, 10*time.Second, 50*time.Millisecond, "the standby has the table")

		db := openWith(t, standbyDSN, Options{Driver: driver, MaxConns: 1})
		backend := func() (pid int) {
			require.NoError(t, db.Pool().QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
			return pid
		}
		before := backend()
		err = refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO items (id) VALUES ('a')`)
			return err
		})
		require.ErrorIs(t, err, refset.ErrUnavailable)
		require.NotErrorIs(t, err, refset.ErrCommitUnknown)
		assert.Zero(t, count(t, primary, `SELECT count(*) FROM items`), "nothing written")
		assert.NotEqual(t, before, backend(), "the connection that could not write was dropped")
	})
}

// TestFencedSessionIsLeft: on pgx, a connection whose server reported that it takes
// no writes (default_transaction_read_only, as an operator fences a primary, here
// for one session) is dropped before it is used again: the next unit of work runs
// on a new connection, and commits. (lib/pq begins its transactions READ WRITE,
// which such a fence does not stop.)
func TestFencedSessionIsLeft(t *testing.T) {
	db := openWith(t, pgtest.DSN(t), Options{Driver: DriverPgx, MaxConns: 1})
	ctx := t.Context()
	_, err := db.Pool().ExecContext(ctx, `CREATE TABLE items (id text PRIMARY KEY)`)
	require.NoError(t, err)
	backend := func() (pid int) {
		require.NoError(t, db.Pool().QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
		return pid
	}
	fenced := backend()
	_, err = db.Pool().ExecContext(ctx, `SET default_transaction_read_only = on`)
	require.NoError(t, err)
	require.NoError(t, refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO items (id) VALUES ('a')`)
		return err
	}))
	assert.NotEqual(t, fenced, backend())
}

// TestFencedSessionIsLeftOnCallersPool: on a pool of the caller's (lib/pq's through
// NewConnector, pgx's as sql.Open makes it), a connection whose server takes no
// writes (default_transaction_read_only, as an operator fences a primary, here for
// one session) is left as on Open's pools: a unit of work, and a statement that
// commits on its own (refsetdriver.OwnCommits), commit on another connection, at the
// latest on the call after the one the server refused (lib/pq learns of the fence
// only from that refusal; pgx from the server's report, before the call).
func TestFencedSessionIsLeftOnCallersPool(t *testing.T) {
	forEachDriver(t, func(t *testing.T, driver string) {
		ctx := t.Context()
		pool := callersPool(t, driver, pgtest.DSN(t))
		pool.SetMaxOpenConns(1)
		db, err := New(ctx, pool, Options{})
		require.NoError(t, err)
		_, err = pool.ExecContext(ctx, `CREATE TABLE items (id text PRIMARY KEY)`)
		require.NoError(t, err)
		backend := func() (pid int) {
			require.NoError(t, pool.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
			return pid
		}
		fence := func() int {
			fenced := backend()
			_, err := pool.ExecContext(ctx, `SET default_transaction_read_only = on`)
			require.NoError(t, err)
			return fenced
		}

		fenced := fence()
		require.NoError(t, refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO items (id) VALUES ('unit')`)
			return err
		}), "lib/pq begins READ WRITE; pgx leaves the fenced connection first")
		if driver == DriverPgx {
			assert.NotEqual(t, fenced, backend(), "the fenced connection was left")
		}

		own := db.Driver().(refsetdriver.OwnCommits)
		insert := func(id string) error {
			return own.QueryOwn(ctx, `INSERT INTO items (id) VALUES ($1) RETURNING id`, []any{id},
				func(*sql.Rows) error { return nil }, nil)
		}
		fenced = fence()
		err = insert("own")
		if driver == DriverLibPQ {
			require.ErrorIs(t, translateError(err, ""), refset.ErrUnavailable, "refused by the fenced session")
			assert.NotErrorIs(t, translateError(err, ""), refset.ErrCommitUnknown)
			require.NoError(t, insert("own"), "the next call dials again")
		} else {
			require.NoError(t, err, "the fenced connection was left before the statement")
		}
		assert.NotEqual(t, fenced, backend(), "the fenced connection was dropped")
		assert.Equal(t, 2, count(t, db, `SELECT count(*) FROM items`))
	})
}

// TestFencedServerIsLeftOnceUnfenced: a server that takes no writes for a role (ALTER
// ROLE ... SET default_transaction_read_only, as an operator fences a primary; here
// for a role of the test's own, so that no other test is fenced) refuses a statement
// that commits on its own with ErrUnavailable, having changed nothing, never
// ErrCommitUnknown; and its connections are not kept: once the fence is lifted (the
// new primary is up), the next statement dials again and commits, on every pool,
// Open's and the caller's, lib/pq and pgx.
func TestFencedServerIsLeftOnceUnfenced(t *testing.T) {
	forEachDriver(t, func(t *testing.T, driver string) {
		for _, callers := range []bool{false, true} {
			t.Run(fmt.Sprintf("callers=%v", callers), func(t *testing.T) {
				ctx := t.Context()
				dsn, schema := pgtest.New(t)
				admin := openWith(t, dsn, Options{})
				role := schema + "_writer"
				exec := func(q string) {
					t.Helper()
					_, err := admin.Pool().ExecContext(ctx, q)
					require.NoError(t, err, q)
				}
				exec(`CREATE ROLE ` + role + ` LOGIN`)
				t.Cleanup(func() {
					// After the pools below have closed (cleanups run last first).
					_, err := admin.Pool().ExecContext(context.Background(), `DROP OWNED BY `+role+`; DROP ROLE `+role)
					assert.NoError(t, err)
				})
				exec(`CREATE TABLE items (id text PRIMARY KEY)`)
				exec(`GRANT USAGE ON SCHEMA ` + schema + ` TO ` + role)
				exec(`GRANT ALL ON items TO ` + role)
				exec(`ALTER ROLE ` + role + ` SET default_transaction_read_only = on`)

				asURL, _ := pgtest.Forms(t, dsn)
				u, err := url.Parse(asURL)
				require.NoError(t, err)
				u.User = url.User(role)
				var db *DB
				if callers {
					pool := callersPool(t, driver, u.String())
					pool.SetMaxOpenConns(2)
					db, err = New(ctx, pool, Options{})
					require.NoError(t, err)
					t.Cleanup(func() { db.Close() })
				} else {
					db = openWith(t, u.String(), Options{Driver: driver, MaxConns: 2})
				}
				own := db.Driver().(refsetdriver.OwnCommits)
				insert := func(id string) error {
					return own.QueryOwn(ctx, `INSERT INTO items (id) VALUES ($1) RETURNING id`, []any{id},
						func(*sql.Rows) error { return nil }, nil)
				}
				for i := range 3 {
					err := translateError(insert(fmt.Sprint("fenced", i)), "")
					require.ErrorIs(t, err, refset.ErrUnavailable, "the fenced server refuses")
					require.NotErrorIs(t, err, refset.ErrCommitUnknown)
				}
				exec(`ALTER ROLE ` + role + ` RESET default_transaction_read_only`)
				require.NoError(t, insert("unfenced"), "a new connection, to the server as it is now")
				assert.Equal(t, 1, count(t, admin, `SELECT count(*) FROM items`))
			})
		}
	})
}
