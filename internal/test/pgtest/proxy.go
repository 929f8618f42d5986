package pgtest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync/atomic"
	"testing"
)

// Proxy is a TCP proxy in front of the test server that loses a connection at the
// moment a failover or a crash would hurt most: around COMMIT, or around a statement
// that commits on its own. It reads the PostgreSQL protocol's messages (the DSN it
// gives has sslmode=disable, so they are in the clear) and passes everything through
// until armed. Each Cut* method arms it for one statement: the first connection to
// run a statement that matches takes the arming, and the proxy passes everything
// through again; arming anew replaces an arming no statement took yet.
//
// A statement matches when a connection runs it: in a simple query (Query), or by a
// Bind of a prepared statement, prepared in the same round trip or any time before on
// that connection (pgx's statement cache and database/sql's Stmt send the text once,
// in a Parse, then only its name). Preparing a statement (Parse, Describe, Sync) runs
// nothing and matches nothing.
//
//   - CutCommitReply and CutAfterCommitSent wait for a COMMIT: a statement that is
//     COMMIT or END alone, with WORK or TRANSACTION or not, in any case, with a
//     semicolon after it or not. A statement that only names a commit (a table
//     commits, a string 'commit', an argument) is none, nor COMMIT AND CHAIN, COMMIT
//     PREPARED or a simple query of several statements.
//   - CutAfterSent and CutReplyTo wait for a statement that holds their needle, in any
//     case: in its SQL text (a simple query's whole text), or in one of the arguments
//     its Bind sends, as sent (text, or a binary value's bytes).
//
// The statement's round trip ends with the message the server answers with
// ReadyForQuery: the simple query itself, or the Sync after the Bind. CutAfterSent
// and CutAfterCommitSent end the client's connection before that message goes on to
// the server, and then send it: the server runs the statement to its end (it commits,
// when it is COMMIT or commits on its own at the Sync) with no client to tell, and
// the client hears only the loss, never the answer. CutCommitReply and CutReplyTo let
// the round trip through and drop the server's answer to it, then end the connection
// at the round trip's ReadyForQuery: the statement ran to its end while its client
// hears only the loss. What is dropped is what the server had not sent when the
// statement ran: a PostgreSQL server holds its answers until the round trip's end
// (the Sync, or a simple query's last statement) or a Flush message, so the answers
// to statements before it in the round trip pass only when a Flush was sent between
// them and it; the others are lost with its own, as a crash would lose them.
type Proxy struct {
	forwarder
	armed    atomic.Pointer[cut] // what the proxy waits for; nil: nothing
	refusing atomic.Bool
	noCancel atomic.Bool  // drop cancel requests
	ready    atomic.Int64 // the server's ReadyForQuery messages

	conns map[net.Conn]struct{} // under mu
}

// A cut is one arming of the proxy: the statement it waits for and where it cuts.
// Arming stores a new one, never changes one, and the connection that cuts takes it
// by compare-and-swap: two connections never cut for one arming, and a connection
// that matched an arming since replaced does not take the new one.
type cut struct {
	commit    bool   // wait for COMMIT (isCommit); else for a statement that holds needle
	needle    []byte // lower-cased
	afterSent bool   // cut the client off as the round trip goes on; else drop its answer
}

// String says what c waits for and where it cuts, as an error names it.
func (c *cut) String() string {
	what := "COMMIT"
	if !c.commit {
		what = fmt.Sprintf("statement holding %q", c.needle)
	}
	if c.afterSent {
		return "cut the client of the next " + what + " off before it reaches the server"
	}
	return "drop the server's answer to the next " + what
}

// cancelRequestCode opens the startup-format message of a cancel request.
const cancelRequestCode = 80877102

// NewProxy starts a proxy to the server of dsn (a DSN of DSN or New) and returns the
// same DSN through the proxy. The proxy stops when tb ends.
func NewProxy(tb testing.TB, dsn string) (*Proxy, string) {
	tb.Helper()
	ln, target, through := inFrontOf(tb, "proxy", dsn)
	return startProxy(tb, ln, target, nil), through
}

// startProxy starts a proxy on ln in front of target, with its dialed hook (nil but
// in a test), and stops it when tb ends.
func startProxy(tb testing.TB, ln net.Listener, target string, dialed func()) *Proxy {
	p := &Proxy{forwarder: forwarder{ln: ln, target: target, dialed: dialed}, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve(p.refusing.Load, p.register)
	tb.Cleanup(func() {
		p.close()
		// An arming no statement took means the test never lost the connection it
		// meant to: whatever it asserted afterwards held without the loss.
		if a := p.armed.Load(); a != nil && !tb.Failed() {
			tb.Errorf("pgtest: the proxy was armed to %s, and no statement took it before the test ended: the connection was never lost (call Disarm where an arming may rightly go untaken)", a)
		}
	})
	return p
}

// inFrontOf listens for a forwarder (what) to the server of dsn, a DSN of DSN or
// New, and returns the listener, the server's address, and the DSN through the
// forwarder: with sslmode=disable, so that it reads the protocol's messages.
func inFrontOf(tb testing.TB, what, dsn string) (ln net.Listener, target, through string) {
	tb.Helper()
	asURL, _ := Forms(tb, dsn)
	u, err := url.Parse(asURL)
	if err != nil {
		tb.Fatalf("pgtest: %s: read the DSN: %v", what, err)
	}
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("pgtest: %s: listen: %v", what, err)
	}
	target = u.Host
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	u.Host = ln.Addr().String()
	return ln, target, u.String()
}

// CutCommitReply arms the proxy: the server's answer to the next COMMIT (of any
// connection) is dropped and that connection ended once the server answered it, so
// the transaction commits while its client hears only the connection's loss.
func (p *Proxy) CutCommitReply() { p.armed.Store(&cut{commit: true}) }

// CutAfterCommitSent arms the proxy: the next connection that sends COMMIT loses its
// client just before the COMMIT goes on to the server, so the server runs the COMMIT
// with no one to tell.
func (p *Proxy) CutAfterCommitSent() { p.armed.Store(&cut{commit: true, afterSent: true}) }

// CutAfterSent arms the proxy: the next connection that runs a statement whose SQL
// text or arguments hold needle (in any case) loses its client just before the
// message that ends the statement's round trip goes on to the server, so the server
// runs the statement with no one to tell.
func (p *Proxy) CutAfterSent(needle string) {
	p.armed.Store(&cut{needle: bytes.ToLower([]byte(needle)), afterSent: true})
}

// CutReplyTo arms the proxy: the next connection that runs a statement whose SQL text
// or arguments hold needle (in any case) has the server's answer to it dropped, once
// complete (ReadyForQuery: a statement outside a transaction has committed), and is
// ended: the statement ran to its end while its client hears only the connection's
// loss.
func (p *Proxy) CutReplyTo(needle string) { p.armed.Store(&cut{needle: bytes.ToLower([]byte(needle))}) }

// Disarm takes back an arming no statement took, and says whether there was one. A
// test ends in error when its proxy is still armed (the loss it armed for never came),
// so one whose arming may rightly go untaken disarms it before it ends.
func (p *Proxy) Disarm() (wasArmed bool) { return p.armed.Swap(nil) != nil }

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

// register starts passing a new connection on (serve calls it, under mu).
func (p *Proxy) register(client, server net.Conn) {
	p.conns[client], p.conns[server] = struct{}{}, struct{}{}
	c := &conn{p: p, client: client, server: server, statements: map[string][]byte{}}
	p.wg.Add(2)
	go c.fromClient()
	go c.fromServer()
}

// conn is one client's connection through the proxy. fromClient reads the client's
// messages and fromServer the server's, each on a goroutine of its own; they share
// only the atomics that say where the connection is cut, which fromClient sets before
// the round trip it cuts goes on to the server, so before any answer to it can come.
type conn struct {
	p              *Proxy
	client, server net.Conn

	// fromClient's alone.
	statements map[string][]byte // the SQL text of the statements prepared, by name ("": the unnamed one)
	sending    roundTrip         // the round trip being sent
	rounds     int64             // the round trips sent, the startup's first: each one's number

	cutRound   atomic.Int64 // the round trip cut, counted as rounds; 0: none
	cutAnswers atomic.Int64 // how many of its statements' answers pass (CutReplyTo, CutCommitReply)
	clientGone atomic.Bool  // the client is cut off: nothing more goes to it
}

// roundTrip is what fromClient learnt of a round trip it sends.
type roundTrip struct {
	executes int64 // its Execute messages so far: the statements run in it
	flushed  int64 // the statements run in it before its last Flush message
	match    *cut  // the arming one of its statements matched; nil: none
	before   int64 // the statements whose answers the server flushed before the one that matched
	taken    bool  // match's answers are cut already (matched): it was the arming still
}

// fromClient passes the client's messages on to the server, and cuts the connection
// when a round trip runs the statement the proxy waits for, just before the message
// that ends that round trip goes on.
func (c *conn) fromClient() {
	defer c.p.wg.Done()
	ends := []net.Conn{c.client, c.server}
	defer func() { c.p.end(ends...) }()

	// The first message, a startup message or a cancel request, has no type byte.
	frame, err := readFrame(c.client, true)
	if err != nil || isCancelRequest(frame) && c.p.noCancel.Load() {
		return
	}
	c.rounds = 1 // the startup, which the server ends with ReadyForQuery too
	if _, err := c.server.Write(frame); err != nil {
		return
	}
	for {
		frame, err := readFrame(c.client, false)
		if err != nil {
			return
		}
		if c.note(frame) && c.endRound() {
			// The client is cut off already, so no answer can reach it, and the
			// server now gets the round trip and runs it with no one to tell. Its
			// side ends once it answered (fromServer): closed now, its socket could
			// be reset before the server read the round trip.
			c.server.Write(frame)
			ends = ends[:1]
			return
		}
		if _, err := c.server.Write(frame); err != nil {
			return
		}
	}
}

// note learns what one of the client's messages does: it keeps the SQL text of the
// statements a Parse prepares until a Close ends them, matches each statement a Query
// or a Bind runs against the proxy's arming, and reports whether the message ends a
// round trip (the server answers it with ReadyForQuery).
func (c *conn) note(frame []byte) (endsRound bool) {
	armed := c.p.armed.Load()
	m := message{rest: frame[5:]}
	switch frame[0] {
	case 'Q': // Query: the SQL text
		sql := m.cString()
		delete(c.statements, "") // a simple query ends the unnamed statement
		c.matched(armed, armed != nil && armed.matchesSQL(sql))
		return true
	case 'P': // Parse: the statement's name, its SQL text, its parameters' types
		name, sql := m.cString(), m.cString()
		c.statements[string(name)] = sql
	case 'B': // Bind: the portal's name, the statement's, the arguments' formats, the arguments
		m.cString()
		matches := armed != nil && armed.matchesSQL(c.statements[string(m.cString())])
		m.next(2 * m.uint16())
		for n := m.uint16(); n > 0 && armed != nil && !matches; n-- {
			matches = armed.matchesArgument(m.next(m.int32())) // -1, NULL, reads nothing
		}
		c.matched(armed, matches)
	case 'E': // Execute
		c.sending.executes++
	case 'H': // Flush: the server sends what it has answered so far
		c.sending.flushed = c.sending.executes
	case 'C': // Close: 'S' and a statement's name, or 'P' and a portal's
		if kind := m.next(1); string(kind) == "S" {
			delete(c.statements, string(m.cString()))
		}
	case 'S', 'F': // Sync, FunctionCall
		return true
	}
	return false
}

// matched notes that the round trip being sent runs a statement that matches armed,
// if it matches and is the first of the round trip to. A cut of the answers takes
// the arming here, before the statement's message goes on: the server answers the
// statements before a Flush without waiting for the round trip's Sync, so an answer
// of the matching statement could otherwise pass before endRound set the cut (the
// ticket reached the client, under load, and the test saw its unit committed). A cut
// of the client, after the round trip is sent, waits for endRound.
func (c *conn) matched(armed *cut, matches bool) {
	if !matches || c.sending.match != nil {
		return
	}
	c.sending.match, c.sending.before = armed, c.sending.flushed
	if !armed.afterSent && c.p.armed.CompareAndSwap(armed, nil) {
		c.cutAnswers.Store(c.sending.before) // before the round: fromServer reads them in the other order
		c.cutRound.Store(c.rounds + 1)       // the round trip being sent (endRound counts it)
		c.sending.taken = true
	}
}

// endRound ends the round trip being sent, whose last message is not yet forwarded.
// When it runs the statement the proxy waits for and the arming is still there, the
// connection is cut: from this round trip on, fromServer drops the answer it should;
// a CutAfter*Sent cuts the client off at once, and cutOff is true.
func (c *conn) endRound() (cutOff bool) {
	c.rounds++
	r := c.sending
	c.sending = roundTrip{}
	if r.match == nil || r.match.afterSent && !c.p.armed.CompareAndSwap(r.match, nil) {
		return false
	}
	if !r.taken && !r.match.afterSent { // the arming was taken by another connection first
		return false
	}
	c.cutAnswers.Store(r.before)
	c.cutRound.Store(c.rounds)
	if r.match.afterSent {
		c.clientGone.Store(true)
		c.p.end(c.client)
	}
	return r.match.afterSent
}

// fromServer passes the server's messages on to the client, but those the
// connection's cut drops: all of them once the client is cut off, or the answer to
// the cut round trip from its statement's on. It ends the connection at that round
// trip's ReadyForQuery, when the server has run it to its end.
func (c *conn) fromServer() {
	defer c.p.wg.Done()
	defer c.p.end(c.server, c.client)
	// round is the round trip the server answers (counted as fromClient's rounds),
	// answered the statements of it answered so far: each gets one CommandComplete,
	// EmptyQueryResponse or PortalSuspended, or an ErrorResponse that ends the rest.
	round, answered := int64(1), int64(0)
	for {
		frame, err := readFrame(c.server, false)
		if err != nil {
			return
		}
		cutting := round == c.cutRound.Load()
		drop := c.clientGone.Load() || cutting && answered >= c.cutAnswers.Load()
		switch frame[0] {
		case 'C', 'I', 's', 'E':
			answered++
		case 'Z':
			c.p.ready.Add(1) // before the client can hear it, and read the count
			if cutting {
				return
			}
			round, answered = round+1, 0
		}
		if drop {
			continue
		}
		// A write that fails once the client was cut off is a dropped message: the
		// server's side stays until the cut round trip's end.
		if _, err := c.client.Write(frame); err != nil && !c.clientGone.Load() {
			return
		}
	}
}

// matchesSQL reports whether a statement run with the SQL text sql is the one c waits
// for.
func (c *cut) matchesSQL(sql []byte) bool {
	if c.commit {
		return isCommit(sql)
	}
	return bytes.Contains(bytes.ToLower(sql), c.needle)
}

// matchesArgument reports whether an argument a statement runs with makes it the one
// c waits for: one holding the needle does; COMMIT takes no arguments, and a word
// commit in one is no COMMIT.
func (c *cut) matchesArgument(arg []byte) bool {
	return !c.commit && bytes.Contains(bytes.ToLower(arg), c.needle)
}

// isCommit reports whether sql is a COMMIT alone: COMMIT or END, with WORK or
// TRANSACTION or not, in any case, with white space and a semicolon after it or not.
func isCommit(sql []byte) bool {
	words := bytes.Fields(bytes.TrimSuffix(bytes.TrimSpace(sql), []byte(";")))
	if len(words) == 0 || len(words) > 2 {
		return false
	}
	if !bytes.EqualFold(words[0], []byte("commit")) && !bytes.EqualFold(words[0], []byte("end")) {
		return false
	}
	return len(words) == 1 || bytes.EqualFold(words[1], []byte("work")) || bytes.EqualFold(words[1], []byte("transaction"))
}

// isCancelRequest reports whether a client's first message is a cancel request.
func isCancelRequest(frame []byte) bool {
	return len(frame) == 16 && binary.BigEndian.Uint32(frame[4:]) == cancelRequestCode
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

// message reads the fields of a message's body in order. A message cut short reads
// as empty fields from there: the server refuses it anyway, and the proxy need not.
type message struct{ rest []byte }

// next reads the next n bytes, or what is left; a negative n (a NULL's length) reads
// nothing.
func (m *message) next(n int) []byte {
	n = max(0, min(n, len(m.rest)))
	field := m.rest[:n]
	m.rest = m.rest[n:]
	return field
}

// cString reads a string ended by a zero byte, which it drops.
func (m *message) cString() []byte {
	n := bytes.IndexByte(m.rest, 0)
	if n < 0 {
		return m.next(len(m.rest))
	}
	s := m.next(n)
	m.next(1)
	return s
}

func (m *message) uint16() int {
	b := m.next(2)
	if len(b) < 2 {
		return 0
	}
	return int(binary.BigEndian.Uint16(b))
}

func (m *message) int32() int {
	b := m.next(4)
	if len(b) < 4 {
		return 0
	}
	return int(int32(binary.BigEndian.Uint32(b)))
}

func (p *Proxy) end(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		c.Close()
		delete(p.conns, c)
	}
}

// close closes every connection, and one it accepts meanwhile.
func (p *Proxy) close() {
	p.shut(func() {
		for c := range p.conns {
			c.Close()
		}
	})
}
