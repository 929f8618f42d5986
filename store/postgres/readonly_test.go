package postgres

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/pgtest"
	"github.com/refsetdb/refset/refset"
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
