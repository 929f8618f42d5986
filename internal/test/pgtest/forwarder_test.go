package pgtest

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// closeWhileAccepting checks that a forwarder's Close closes a connection it accepted
// while it was closing: one whose server end was dialed before Close closed the
// listener, and that registers after Close closed the connections it knew. Left
// open, its goroutines passing it on, Close would wait on them until the client or
// the server hung up: a test's cleanup hung (the server waits out its
// authentication_timeout, a minute by default, for a startup that never comes).
// start starts the forwarder on ln in front of target with its dialed hook, stopped
// when t ends, and returns it and its Close.
func closeWhileAccepting(t *testing.T, start func(ln net.Listener, target string, dialed func()) (*forwarder, func())) {
	ln, target, _ := inFrontOf(t, "forwarder", DSN(t))
	dialed, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	fw, closeFw := start(ln, target, func() {
		once.Do(func() { close(dialed) })
		<-release
	})
	client, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() }) // before the forwarder's Close: frees it if it hung
	<-dialed

	closed := make(chan struct{})
	go func() {
		closeFw()
		close(closed)
	}()
	require.Eventually(t, func() bool {
		fw.mu.Lock()
		defer fw.mu.Unlock()
		return fw.closed
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
