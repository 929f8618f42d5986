package pgtest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy is a TCP proxy in front of the test server that loses a connection at the
// moment a failover or a crash would hurt most: around COMMIT. It reads the
// PostgreSQL protocol's message frames (the DSN it gives has sslmode=disable, so
// they are in the clear) and passes everything through until armed.
type Proxy struct {
	ln       net.Listener
	target   string
	cut      atomic.Int32 // a Cut* armed: cutReply or cutAfterSend
	refusing atomic.Bool
	noCancel atomic.Bool // drop cancel requests
	needle   atomic.Pointer[string]
	ready    atomic.Int64 // the server's ReadyForQuery messages
	wg       sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// cancelRequestCode opens the startup-format message of a cancel request.
const cancelRequestCode = 80877102

const (
	cutReply     = 1 // drop the server's reply to the next COMMIT
	cutAfterSend = 2 // end the connection once the next COMMIT is sent
	cutReplyTo   = 3 // drop the server's reply to the next statement holding the needle
)

// NewProxy starts a proxy to the server of dsn (a DSN of DSN or New) and returns the
// same DSN through the proxy. The proxy stops when tb ends.
func NewProxy(tb testing.TB, dsn string) (*Proxy, string) {
	tb.Helper()
	asURL, _ := Forms(tb, dsn)
	u, err := url.Parse(asURL)
	if err != nil {
		tb.Fatalf("pgtest: proxy: read the DSN: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("pgtest: proxy: listen: %v", err)
	}
	p := &Proxy{ln: ln, target: u.Host, conns: map[net.Conn]struct{}{}}
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	u.Host = ln.Addr().String()
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.close)
	return p, u.String()
}

// CutCommitReply arms the proxy: the server's reply to the next COMMIT (of any
// connection) is dropped and that connection ended, so the transaction commits while
// its client hears only the connection's loss.
func (p *Proxy) CutCommitReply() { p.cut.Store(cutReply) }

// CutAfterCommitSent arms the proxy: the next connection that sends COMMIT is ended
// right after the server got it, so the server runs the COMMIT with no one to tell.
func (p *Proxy) CutAfterCommitSent() { p.CutAfterSent("commit") }

// CutAfterSent arms the proxy: the next connection that sends a statement whose
// text or arguments hold needle (a query, or a Parse or Bind of the extended
// protocol, up to its Sync) is ended right after the server got it.
func (p *Proxy) CutAfterSent(needle string) {
	p.needle.Store(&needle)
	p.cut.Store(cutAfterSend)
}

// CutReplyTo arms the proxy: the next connection that sends a statement whose text
// or arguments hold needle has the server's answer to it dropped, once complete
// (ReadyForQuery: a statement outside a transaction has committed), and is ended:
// the statement ran to its end while its client hears only the connection's loss.
func (p *Proxy) CutReplyTo(needle string) {
	p.needle.Store(&needle)
	p.cut.Store(cutReplyTo)
}

// DropCancels makes the proxy drop cancel requests: pgx sends one after it lost a
// connection mid-statement, which would end a COMMIT that CutAfterCommitSent leaves
// the server to finish.
func (p *Proxy) DropCancels() { p.noCancel.Store(true) }

// ReadyForQuery is how many ReadyForQuery messages the server has sent through the
// proxy, on all its connections: one per round trip a client waits for (a simple
// query, or the Sync that ends an extended protocol's messages, a pgx batch's).
func (p *Proxy) ReadyForQuery() int64 { return p.ready.Load() }

// Refuse makes the proxy refuse (close at once) new connections while on is true:
// a server that cannot be reached.
func (p *Proxy) Refuse(on bool) { p.refusing.Store(on) }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.refusing.Load() {
			client.Close()
			continue
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.track(client, server)
		p.wg.Add(2)
		sent := new(atomic.Bool) // the client sent the statement whose reply CutReplyTo drops
		go p.pipe(client, server, true, p.fromClient(sent))
		go p.pipe(server, client, false, func(frame []byte, first bool) (send, goOn bool) {
			return p.fromServer(frame, sent)
		})
	}
}

// pipe copies frames from src to dst until either ends; keep decides, for each
// frame, whether it goes through and whether the connection goes on after it. The
// client's first frame, its startup message, has no type byte (untypedFirst).
//
// A cut on the client's side ends only the client's connection: the server reads
// and runs what it was sent, and its side ends when its reply finds no one (closed
// at once, the server's socket could be reset before the server read the COMMIT).
func (p *Proxy) pipe(src, dst net.Conn, untypedFirst bool, keep func(frame []byte, first bool) (send, goOn bool)) {
	defer p.wg.Done()
	ends := []net.Conn{src, dst}
	defer func() { p.end(ends...) }()
	for first := true; ; first = false {
		frame, err := readFrame(src, first && untypedFirst)
		if err != nil {
			return
		}
		send, goOn := keep(frame, first)
		if send {
			if _, err := dst.Write(frame); err != nil {
				return
			}
		}
		if !goOn {
			if untypedFirst {
				ends = ends[:1]
			}
			return
		}
	}
}

// fromClient is what passes a connection's client frames: all of them, but armed
// with cutAfterSend, the connection ends after the one that makes the server run the
// statement that holds the needle: a simple query, or the Sync after an extended
// protocol's Parse or Bind of it. The first frame, the startup message, has no type
// byte.
func (p *Proxy) fromClient(sent *atomic.Bool) func(frame []byte, first bool) (send, goOn bool) {
	marked := false
	return func(frame []byte, first bool) (send, goOn bool) {
		if first {
			cancel := len(frame) == 16 && binary.BigEndian.Uint32(frame[4:]) == cancelRequestCode
			return !cancel || !p.noCancel.Load(), true
		}
		if p.cut.Load() == cutReplyTo && (frame[0] == 'P' || frame[0] == 'B' || frame[0] == 'Q') && p.holdsNeedle(frame) &&
			p.cut.CompareAndSwap(cutReplyTo, 0) {
			sent.Store(true)
		}
		if p.cut.Load() != cutAfterSend {
			return true, true
		}
		switch frame[0] {
		case 'P', 'B':
			marked = marked || p.holdsNeedle(frame)
			return true, true
		case 'Q':
			if !p.holdsNeedle(frame) {
				return true, true
			}
		case 'S':
			if !marked {
				return true, true
			}
		default:
			return true, true
		}
		return true, !p.cut.CompareAndSwap(cutAfterSend, 0)
	}
}

// fromServer passes the server's frames; armed with cutReply, it drops a
// CommandComplete of COMMIT and ends the connection; once the client sent the
// statement CutReplyTo waits for, it drops the server's next ReadyForQuery and ends
// the connection.
func (p *Proxy) fromServer(frame []byte, sent *atomic.Bool) (send, goOn bool) {
	if frame[0] == 'Z' {
		p.ready.Add(1)
	}
	if frame[0] == 'Z' && sent.Load() {
		return false, false
	}
	if p.cut.Load() != cutReply || frame[0] != 'C' || !bytes.HasPrefix(frame[5:], []byte("COMMIT\x00")) {
		return true, true
	}
	if !p.cut.CompareAndSwap(cutReply, 0) {
		return true, true
	}
	return false, false
}

// holdsNeedle reports whether a client's frame holds the armed needle, in any case.
func (p *Proxy) holdsNeedle(frame []byte) bool {
	needle := p.needle.Load()
	return needle != nil && bytes.Contains(bytes.ToLower(frame[5:]), bytes.ToLower([]byte(*needle)))
}

// readFrame reads one protocol message: a type byte and a length that counts
// itself, or, for the client's first (startup or SSL request), the length alone.
func readFrame(r io.Reader, untyped bool) ([]byte, error) {
	head := 5
	if untyped {
		head = 4
	}
	frame := make([]byte, head)
	if _, err := io.ReadFull(r, frame); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(frame[head-4:]))
	if n < 4 || n > 1<<30 {
		return nil, errors.New("pgtest: proxy: bad frame length")
	}
	frame = append(frame, make([]byte, n-4)...)
	_, err := io.ReadFull(r, frame[head:])
	return frame, err
}

func (p *Proxy) track(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
}

func (p *Proxy) end(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		c.Close()
		delete(p.conns, c)
	}
}

func (p *Proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
