package postgres

import (
	"context"
	"database/sql/driver"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lib/pq"
)

// lib/pq dials with the context its Connect is given, but then reads and writes the
// connection's startup (the TLS request, the startup message, authentication) with
// no regard for it: only the DSN's connect_timeout bounds that, and a DSN has none
// unless the caller wrote one. A server that accepts the connection and never
// answers (a hung host, a proxy whose backend is gone) then held Open, and every
// later dial of the pool, for ever, whatever the caller's deadline or cancel. pgx
// watches the context itself.
//
// So each connection the lib/pq connectors refset makes (Open's pools, the
// replica's, NewConnector's) dials through a dialer of its own, which keeps the
// sockets it dials on the connection's line, and Connect cuts the line's I/O once
// its context ends before the connection is made: lib/pq's read fails at once, it
// closes the socket, and Connect returns the context's error. The line stays with
// the connection once made, for the calls on it (see watch.go).

// startupConnector makes lib/pq's connections of a configuration, which end their
// startup with the context that asks for them, and keep their line
// (guardedConnector is the driver.Connector).
type startupConnector struct{ cfg pq.Config }

// withStartupContext is the connector of cfg whose connections end their startup
// with the context of Connect.
func withStartupContext(cfg pq.Config) (startupConnector, error) {
	if _, err := pq.NewConnectorConfig(cfg); err != nil {
		return startupConnector{}, err
	}
	return startupConnector{cfg: cfg}, nil
}

// Driver is lib/pq's: database/sql names the pool's driver by it (driverOf).
func (c startupConnector) Driver() driver.Driver { return &pq.Driver{} }

// connect makes a connection and its line. lib/pq's connector is made anew for each
// connection (a configuration and a dialer: nothing to it), so that the dialer, the
// connection's own, also holds the sockets of the cancel requests lib/pq sends for
// it later.
func (c startupConnector) connect(ctx context.Context) (driver.Conn, *line, error) {
	connector, err := pq.NewConnectorConfig(c.cfg)
	if err != nil {
		return nil, nil, err
	}
	l := &line{}
	connector.Dialer(lineDialer{l})
	stop := context.AfterFunc(ctx, func() { l.cut(ctx.Err()) })
	conn, err := connector.Connect(ctx)
	if !stop() {
		// The context ended before Connect returned: the sockets' I/O may have been
		// cut at any point, so even a connection lib/pq made is not to be trusted.
		// Every socket dialed is closed: lib/pq leaves open the one whose TLS request
		// failed before it tries again without TLS (sslmode=prefer).
		if err == nil {
			conn.Close()
		}
		l.close()
		return nil, nil, ctx.Err()
	}
	if err != nil {
		l.close() // lib/pq closed them, but for the one of sslmode=prefer's first try
		var pe *pq.Error
		if errors.As(err, &pe) {
			err = &startupError{err} // the server's refusal (errors.go)
		}
		return nil, nil, err
	}
	l.made()
	return conn, l, nil
}

// line is what one lib/pq connection dialed: while it starts up, every socket (one
// per host a DSN names, and one more when lib/pq tries again without TLS), the last
// of which is the connection's once it is made; from then on, the connection's
// socket and those of the cancel requests lib/pq sends for it, while they last.
// Cutting the line makes every read and write on them fail at once, those waiting
// included, and those of any socket dialed for it later; a dial in progress ends.
// A connection whose line was cut is done with.
type line struct {
	isCut atomic.Bool // cheap to ask on every call

	mu      sync.Mutex
	socks   []net.Conn
	dialing []*context.CancelFunc // the dials in progress, each ended by its cancel
	up      bool                  // the connection is made: socks[0] is its socket
	cause   error                 // the error of the context that cut the line
}

// longAgo is a deadline in the past: every read and write of a socket given it
// fails at once, those waiting already included.
var longAgo = time.Unix(1, 0)

// dial dials a socket for the line, unless it was cut.
func (l *line) dial(ctx context.Context, network, address string) (net.Conn, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	l.mu.Lock()
	if l.cause != nil {
		l.mu.Unlock()
		return nil, &cutOff{cause: l.cause}
	}
	l.dialing = append(l.dialing, &cancel)
	l.mu.Unlock()

	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, network, address)

	l.mu.Lock()
	defer l.mu.Unlock()
	for i, d := range l.dialing {
		if d == &cancel {
			l.dialing = append(l.dialing[:i], l.dialing[i+1:]...)
			break
		}
	}
	if err != nil {
		return nil, err
	}
	if l.up {
		c = &cancelSocket{Conn: c, l: l}
	}
	l.socks = append(l.socks, c)
	if l.cause != nil {
		_ = c.SetDeadline(longAgo)
	}
	return c, nil
}

// made notes that the connection is made, on the socket dialed last: those dialed
// before it, which lib/pq gave up on, are closed (lib/pq closed all but one).
func (l *line) made() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.up = true
	last := len(l.socks) - 1
	if last < 0 {
		return // dialed elsewhere: nothing to cut
	}
	for _, c := range l.socks[:last] {
		_ = c.Close()
	}
	l.socks = append(l.socks[:0], l.socks[last])
}

// cut ends the I/O of every socket of the line, and of those it dials next, for
// cause, the error of the context that cut it. The first cause stays.
func (l *line) cut(cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cause == nil {
		l.cause = cause
	}
	l.isCut.Store(true)
	for _, c := range l.socks {
		_ = c.SetDeadline(longAgo) // a socket lib/pq closed already says so; nothing to cut
	}
	for _, cancel := range l.dialing {
		(*cancel)()
	}
}

// cutBy is the error of the context that cut the line.
func (l *line) cutBy() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cause
}

// close closes every socket of the line.
func (l *line) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.socks {
		_ = c.Close() // one lib/pq closed already says so
	}
}

// cancelSocket is the socket of a cancel request lib/pq sends for a connection: it
// leaves the connection's line when lib/pq closes it.
type cancelSocket struct {
	net.Conn
	l *line
}

func (s *cancelSocket) Close() error {
	s.l.mu.Lock()
	for i, c := range s.l.socks {
		if c == s {
			s.l.socks = append(s.l.socks[:i], s.l.socks[i+1:]...)
			break
		}
	}
	s.l.mu.Unlock()
	return s.Conn.Close()
}

// lineDialer is lib/pq's default dialer (a net.Dialer, TCP or a Unix socket), which
// dials for one connection's line. lib/pq calls DialContext alone: for the
// connection, with the context of Connect, and for each of its cancel requests,
// with one of its own that ends only after ten seconds (the line's cut ends it
// sooner). Dial and DialTimeout complete its Dialer.
type lineDialer struct{ l *line }

func (d lineDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return d.l.dial(ctx, network, address)
}

func (d lineDialer) Dial(network, address string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

func (d lineDialer) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return d.DialContext(ctx, network, address)
}

var (
	_ pq.Dialer        = lineDialer{}
	_ pq.DialerContext = lineDialer{}
)
