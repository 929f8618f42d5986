package pgtest

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Freezer is a TCP forwarder to the test server that can freeze: it then passes
// nothing on, either way, and closes nothing, as a server that hangs with its
// connections open does (a hung host, a proxy whose backend froze). Connections made
// while it is frozen are accepted and held alike: a new connection's startup, a
// cancel request. Thawed, it passes on what it held, in order, and then closes the
// server's end of each connection whose client closed its own meanwhile.
// (Proxy cuts connections; it never holds them.)
//
// It reads what clients send as the protocol's messages, so that it can freeze just
// before a COMMIT goes on to the server (FreezeAtCommit).
type Freezer struct {
	forwarder
	frozen   atomic.Bool
	atCommit atomic.Bool

	conns []*heldConn // under mu
}

// heldConn is one client's connection through a Freezer.
type heldConn struct {
	client, server net.Conn
	up, down       pipe        // client to server, server to client
	caught         atomic.Bool // the client sent something while the freezer was frozen
	hungUp         atomic.Bool // the client closed its end
}

// pipe passes one direction of a connection on, or holds it while the freezer is
// frozen.
type pipe struct {
	mu   sync.Mutex
	dst  net.Conn
	held [][]byte
	eof  bool // the source ended: dst is closed once what is held went on
}

// NewFreezer starts a freezer in front of the server of dsn (a DSN of DSN or New) and
// returns it, with the DSN through it (sslmode=disable, so that it reads the
// messages). It stops when tb ends.
func NewFreezer(tb testing.TB, dsn string) (*Freezer, string) {
	tb.Helper()
	ln, target, through := inFrontOf(tb, "freezer", dsn)
	return startFreezer(tb, ln, target, nil), through
}

// startFreezer starts a freezer on ln in front of target, with its dialed hook (nil
// but in a test), and stops it when tb ends.
func startFreezer(tb testing.TB, ln net.Listener, target string, dialed func()) *Freezer {
	f := &Freezer{forwarder: forwarder{ln: ln, target: target, dialed: dialed}}
	f.wg.Add(1)
	go f.serve(nil, f.register)
	tb.Cleanup(f.Close)
	return f
}

// Freeze stops the freezer passing anything on.
func (f *Freezer) Freeze() { f.frozen.Store(true) }

// FreezeAtCommit arms the freezer to freeze as the next COMMIT arrives from a
// client, before it goes on: the server never hears it.
func (f *Freezer) FreezeAtCommit() { f.atCommit.Store(true) }

// Frozen reports whether f is frozen (FreezeAtCommit froze it, or Freeze did).
func (f *Freezer) Frozen() bool { return f.frozen.Load() }

// Thaw passes on what the freezer held, and everything from then on.
func (f *Freezer) Thaw() {
	f.atCommit.Store(false)
	f.frozen.Store(false)
	f.mu.Lock()
	conns := append([]*heldConn(nil), f.conns...)
	f.mu.Unlock()
	for _, c := range conns {
		c.up.flush(f)
		c.down.flush(f)
	}
}

// Caught reports how many connections sent something while the freezer was frozen,
// and how many of those their clients have closed since.
func (f *Freezer) Caught() (caught, closed int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		if c.caught.Load() {
			caught++
			if c.hungUp.Load() {
				closed++
			}
		}
	}
	return caught, closed
}

// register starts passing a new connection on (serve calls it, under mu).
func (f *Freezer) register(client, server net.Conn) {
	c := &heldConn{client: client, server: server}
	c.up.dst, c.down.dst = server, client
	f.conns = append(f.conns, c)
	f.wg.Add(2)
	go f.fromClient(c)
	go f.fromServer(c)
}

// fromClient passes the client's messages on, freezing the freezer before a COMMIT
// when it is so armed.
func (f *Freezer) fromClient(c *heldConn) {
	defer f.wg.Done()
	defer c.hungUp.Store(true)
	defer c.up.end(f)
	untyped := true // the first message (a startup message or a cancel request) has no type byte
	for {
		frame, err := readFrame(c.client, untyped)
		if err != nil {
			return
		}
		untyped = false
		if sendsCommit(frame) && f.atCommit.CompareAndSwap(true, false) {
			f.Freeze()
		}
		if c.up.pass(f, frame) {
			c.caught.Store(true)
		}
	}
}

// fromServer passes what the server sends on.
func (f *Freezer) fromServer(c *heldConn) {
	defer f.wg.Done()
	defer c.down.end(f)
	buf := make([]byte, 32<<10)
	for {
		n, err := c.server.Read(buf)
		if n > 0 {
			c.down.pass(f, bytes.Clone(buf[:n]))
		}
		if err != nil {
			return
		}
	}
}

// pass sends b on, or holds it while f is frozen; held reports which.
func (p *pipe) pass(f *Freezer, b []byte) (held bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if f.frozen.Load() {
		p.held = append(p.held, b)
		return true
	}
	p.flushLocked()
	_, _ = p.dst.Write(b)
	return false
}

// end notes that the pipe's source ended: its destination is closed, once what is
// held went on.
func (p *pipe) end(f *Freezer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.eof = true
	if !f.frozen.Load() {
		p.flushLocked()
	}
}

// flush sends on what the pipe held, unless f is frozen again.
func (p *pipe) flush(f *Freezer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !f.frozen.Load() {
		p.flushLocked()
	}
}

func (p *pipe) flushLocked() {
	for _, b := range p.held {
		_, _ = p.dst.Write(b)
	}
	p.held = nil
	if p.eof {
		p.dst.Close()
	}
}

// Close closes every connection: their clients hear the server's end (a test that
// gave up waiting on one frees it so), and one it accepts meanwhile. It may be
// called more than once.
func (f *Freezer) Close() {
	f.shut(func() {
		for _, c := range f.conns {
			c.client.Close()
			c.server.Close()
		}
	})
}

// sendsCommit reports whether a client's message sends COMMIT (isCommit): a simple
// query of it alone, or a Parse of it (a batch that carries COMMIT).
func sendsCommit(frame []byte) bool {
	m := message{rest: frame[5:]}
	switch frame[0] {
	case 'Q':
		return isCommit(m.cString())
	case 'P':
		m.cString() // the statement's name
		return isCommit(m.cString())
	}
	return false
}
