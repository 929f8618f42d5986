package pgtest

import (
	"context"
	"database/sql"
	"io"
	"net"
	"sync"
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

// Close closes a connection the freezer accepted while it was closing: one whose
// server end was dialed before Close closed the listener, and that registers after
// Close closed the connections it knew. Before, it was left open, its goroutines
// passing it on, and Close waited on them until the client or the server hung up:
// a test's cleanup hung (the server waits out its authentication_timeout, a minute
// by default, for a startup that never comes).
func TestFreezerCloseWhileAccepting(t *testing.T) {
	ln, target, _ := inFrontOf(t, "freezer", DSN(t))
	dialed, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f := startFreezer(t, ln, target, func() {
		once.Do(func() { close(dialed) })
		<-release
	})
	client, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() }) // before f's Close: frees it if it hung
	<-dialed

	closed := make(chan struct{})
	go func() {
		f.Close()
		close(closed)
	}()
	require.Eventually(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.closed
	}, 5*time.Second, time.Millisecond, "Close closed the connections it knew")
	close(release)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close still waits on a connection it accepted while closing, left open")
	}
	require.NoError(t, client.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = client.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "the client hears its connection closed")
}
