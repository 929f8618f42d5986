package postgres

import (
	"context"
	"database/sql/driver"
	"net"
	"sync"
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
// So the lib/pq connectors refset makes (Open's pools, the replica's, NewConnector's)
// dial through startupDialer, which hands the sockets it dials to the Connect that
// asked for them (startupConnector), and that Connect cuts their I/O once its context
// ends before the connection is made: lib/pq's read fails at once, it closes the
// socket, and Connect returns the context's error.

// withStartupContext makes c's connections end their startup with the context of
// Connect.
func withStartupContext(c *pq.Connector) driver.Connector {
	c.Dialer(startupDialer{})
	return startupConnector{c}
}

// startupConnector is lib/pq's connector, whose Connect ends with its context.
type startupConnector struct{ *pq.Connector }

func (c startupConnector) Connect(ctx context.Context) (driver.Conn, error) {
	s := &startup{}
	stop := context.AfterFunc(ctx, s.cut)
	conn, err := c.Connector.Connect(context.WithValue(ctx, startupKey{}, s))
	if !stop() {
		// The context ended before Connect returned: the sockets' I/O may have been
		// cut at any point, so even a connection lib/pq made is not to be trusted.
		// Every socket dialed is closed: lib/pq leaves open the one whose TLS request
		// failed before it tries again without TLS (sslmode=prefer).
		if err == nil {
			conn.Close()
		}
		s.close()
		return nil, ctx.Err()
	}
	return conn, err
}

// startupKey is the context key under which startupDialer finds its Connect's
// startup.
type startupKey struct{}

// startup is the sockets one Connect dialed (several: one per host a DSN names, and
// one more when lib/pq tries again without TLS), and whether its context ended.
type startup struct {
	mu    sync.Mutex
	conns []net.Conn
	ended bool
}

// longAgo is a deadline in the past: every read and write of a socket given it
// fails at once, those waiting already included.
var longAgo = time.Unix(1, 0)

// add watches c, dialed for this startup.
func (s *startup) add(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conns = append(s.conns, c)
	if s.ended {
		_ = c.SetDeadline(longAgo)
	}
}

// cut ends the I/O of every socket of the startup, and of those it dials next.
func (s *startup) cut() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	for _, c := range s.conns {
		_ = c.SetDeadline(longAgo) // a socket lib/pq closed already says so; nothing to cut
	}
}

// close closes every socket of the startup.
func (s *startup) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		_ = c.Close() // one lib/pq closed already says so
	}
}

// startupDialer is lib/pq's default dialer (a net.Dialer, TCP or a Unix socket),
// which also hands each socket it dials to the startup of the Connect that asked.
// lib/pq calls DialContext alone; Dial and DialTimeout complete its Dialer.
type startupDialer struct{}

func (d startupDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	if s, ok := ctx.Value(startupKey{}).(*startup); ok {
		s.add(c)
	}
	return c, nil
}

func (d startupDialer) Dial(network, address string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

func (d startupDialer) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return d.DialContext(ctx, network, address)
}

var (
	_ pq.Dialer        = startupDialer{}
	_ pq.DialerContext = startupDialer{}
)
