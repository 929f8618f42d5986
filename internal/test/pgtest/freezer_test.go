package pgtest

import (
	"context"
	"database/sql"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A frozen Freezer passes nothing on, either way, and closes nothing: a statement
// sent then waits (as on a hung server) and runs once it thaws. Armed at COMMIT, it
// freezes before the COMMIT reaches the server, on both drivers, whether the COMMIT
// goes alone or in a batch: the server holds the transaction open, uncommitted, until
// the thaw lets the COMMIT through.
func TestFreezer(t *testing.T) {
	for _, driver := range proxyDrivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			dsn := DSN(t)
			direct, err := sql.Open(driver, dsn)
			require.NoError(t, err)
			t.Cleanup(func() { direct.Close() })
			_, err = direct.ExecContext(ctx, `CREATE TABLE t (v text NOT NULL)`)
			require.NoError(t, err)
			f, frozenDSN := NewFreezer(t, dsn)
			db, err := sql.Open(driver, frozenDSN)
			require.NoError(t, err)
			t.Cleanup(func() { db.Close() })
			require.NoError(t, db.PingContext(ctx))
			count := func() (n int) {
				require.NoError(t, direct.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&n))
				return n
			}

			// Frozen: the insert waits, and the server has not seen it.
			f.Freeze()
			require.True(t, f.Frozen())
			done := make(chan error, 1)
			go func() {
				_, err := db.ExecContext(context.WithoutCancel(ctx), `INSERT INTO t VALUES ('frozen')`)
				done <- err
			}()
			select {
			case err := <-done:
				t.Fatalf("the insert returned through a frozen freezer: %v", err)
			case <-time.After(300 * time.Millisecond):
			}
			assert.Equal(t, 0, count())
			caught, closed := f.Caught()
			assert.Equal(t, 1, caught, "connections that sent something while frozen")
			assert.Equal(t, 0, closed)
			f.Thaw()
			require.False(t, f.Frozen())
			require.NoError(t, <-done)
			assert.Equal(t, 1, count())

			// Armed at COMMIT: the transaction's insert went through, its COMMIT is held.
			f.FreezeAtCommit()
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			_, err = tx.ExecContext(ctx, `INSERT INTO t VALUES ('held')`)
			require.NoError(t, err)
			require.False(t, f.Frozen(), "frozen before any COMMIT")
			go func() { done <- tx.Commit() }()
			require.Eventually(t, f.Frozen, 5*time.Second, 5*time.Millisecond, "COMMIT froze the freezer")
			select {
			case err := <-done:
				t.Fatalf("COMMIT returned through a frozen freezer: %v", err)
			case <-time.After(300 * time.Millisecond):
			}
			assert.Equal(t, 1, count(), "the server committed a COMMIT the freezer held")
			f.Thaw()
			require.NoError(t, <-done)
			assert.Equal(t, 2, count())
		})
	}
}

// Close closes a connection the freezer accepted while it was closing
// (closeWhileAccepting).
func TestFreezerCloseWhileAccepting(t *testing.T) {
	closeWhileAccepting(t, func(ln net.Listener, target string, dialed func()) (*forwarder, func()) {
		f := startFreezer(t, ln, target, dialed)
		return &f.forwarder, f.Close
	})
}
