package postgres

import (
	"context"
	"database/sql"
	"io"
	"net"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/stretchr/testify/require"
)

// TestOpenEndsWithItsContext: on a server that accepts the connection and never
// answers, Open waits only as long as its context, on either driver, whether the
// client asks for TLS first or not: a deadline or a cancel ends it with the
// context's error, and the connection it dialed is closed. (lib/pq alone bounds its
// startup by the DSN's connect_timeout, and without one waited for ever.)
func TestOpenEndsWithItsContext(t *testing.T) {
	forEachDriver(t, func(t *testing.T, driver string) {
		for _, sslmode := range []string{"disable", "prefer"} {
			for _, end := range []struct {
				name string
				ctx  func(context.Context) (context.Context, context.CancelFunc)
				want error
			}{
				{"deadline", func(ctx context.Context) (context.Context, context.CancelFunc) {
					return context.WithTimeout(ctx, 300*time.Millisecond)
				}, context.DeadlineExceeded},
				{"cancel", func(ctx context.Context) (context.Context, context.CancelFunc) {
					ctx, cancel := context.WithCancel(ctx)
					time.AfterFunc(300*time.Millisecond, cancel)
					return ctx, cancel
				}, context.Canceled},
			} {
				t.Run("sslmode="+sslmode+"/"+end.name, func(t *testing.T) {
					addr, accepted := pgtest.SilentServer(t)
					ctx, cancel := end.ctx(t.Context())
					defer cancel()
					done := make(chan error, 1)
					go func() {
						db, err := Open(ctx, "postgres://refset@"+addr+"/x?sslmode="+sslmode, Options{Driver: driver})
						if err == nil {
							db.Close()
						}
						done <- err
					}()
					select {
					case err := <-done:
						require.ErrorIs(t, err, end.want)
					case <-time.After(10 * time.Second):
						t.Fatal("Open still waits for the silent server, long after its context ended")
					}

					// The client closed its end: the server reads EOF, not its deadline.
					var conn net.Conn
					select {
					case conn = <-accepted:
					case <-time.After(5 * time.Second):
						t.Fatal("Open never connected to the server")
					}
					require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
					_, err := io.Copy(io.Discard, conn)
					require.NoError(t, err, "the connection Open dialed is closed")
				})
			}
		}
	})
}

// TestNewConnectorEndsWithItsContext: a caller's lib/pq pool on NewConnector's
// connector dials as Open's pools do: a connection to a server that never answers
// is waited for only as long as the context.
func TestNewConnectorEndsWithItsContext(t *testing.T) {
	addr, _ := pgtest.SilentServer(t)
	connector, err := NewConnector("postgres://refset@" + addr + "/x?sslmode=disable")
	require.NoError(t, err)
	pool := sql.OpenDB(connector)
	defer pool.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- pool.PingContext(ctx) }()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(10 * time.Second):
		t.Fatal("the ping still waits for the silent server, long after its context ended")
	}
}
