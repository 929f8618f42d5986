package pgtest

import (
	"net"
	"sync"
	"testing"
)

// SilentServer listens on loopback, accepts every connection and never answers, as a
// hung host or a proxy whose backend is gone does: a client's startup waits on it
// for ever unless something ends the wait. It returns its address and the
// connections it accepts (the first 16, for a test that checks a client closed
// them), all of which it closes when tb ends.
func SilentServer(tb testing.TB) (addr string, accepted <-chan net.Conn) {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("pgtest: silent server: listen: %v", err)
	}
	conns := make(chan net.Conn, 16)
	var mu sync.Mutex
	var all []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			all = append(all, c)
			mu.Unlock()
			select {
			case conns <- c:
			default:
			}
		}
	}()
	tb.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range all {
			c.Close()
		}
	})
	return l.Addr().String(), conns
}
