package pgtest

import (
	"net"
	"sync"
)

// forwarder is what Proxy and Freezer share: the listener they accept clients on,
// the server they dial for each, and the bookkeeping that lets Close end them all.
// Its mu guards the forwarder's registered connections (which each keeps its own
// way) and closed.
type forwarder struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup // serve and the connections' goroutines

	mu sync.Mutex
	// closed is set by shut, under mu: a connection serve took before shut closed
	// the listener, and registers after shut closed the others, is closed at once
	// instead of left open, its goroutines keeping shut waiting on them.
	closed bool

	// dialed, if set (by a test), runs once serve has the server's end of a new
	// connection, before it registers it.
	dialed func()
}

// serve accepts clients until the listener is closed (start it with wg counting it).
// It closes at once a client refuse (nil: none) turns away, dials the server for each
// other, and hands both ends to register, under mu, which records them and starts
// their goroutines (counted in wg); unless the forwarder is closed, when it closes
// them.
func (fw *forwarder) serve(refuse func() bool, register func(client, server net.Conn)) {
	defer fw.wg.Done()
	for {
		client, err := fw.ln.Accept()
		if err != nil {
			return
		}
		if refuse != nil && refuse() {
			client.Close()
			continue
		}
		server, err := net.Dial("tcp", fw.target)
		if err != nil {
			client.Close()
			continue
		}
		if fw.dialed != nil {
			fw.dialed()
		}
		fw.mu.Lock()
		if fw.closed {
			fw.mu.Unlock()
			client.Close()
			server.Close()
			continue
		}
		register(client, server)
		fw.mu.Unlock()
	}
}

// shut closes the listener, marks the forwarder closed and runs closeAll (under mu),
// which closes every connection registered, then waits for serve and the
// connections' goroutines to end. It may be called more than once.
func (fw *forwarder) shut(closeAll func()) {
	fw.ln.Close()
	fw.mu.Lock()
	fw.closed = true
	closeAll()
	fw.mu.Unlock()
	fw.wg.Wait()
}
