package refsettest

import (
	"net"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/refsetdb/refset/internal/test/pgtest"
)

// Proxy stands between a test and its PostgreSQL server, passing everything through
// until armed to lose a connection at the moment a crash or a failover would hurt
// most. With it a test checks what its code does with refset.ErrUnavailable and
// refset.ErrCommitUnknown on a real server. Each Cut method arms it for one
// statement, on whichever connection runs it first; arming again replaces an arming
// no statement took yet.
//
//   - CutCommitReply(): the next COMMIT commits, and its client hears only the
//     connection's loss, never the answer.
//   - CutAfterCommitSent(): the next COMMIT's client is cut off just before the
//     COMMIT goes on to the server, which runs it with no client left to tell.
//   - CutReplyTo(needle): the next statement that holds needle runs to its end (one
//     outside a transaction commits), and its client hears only the loss.
//   - CutAfterSent(needle): the next statement that holds needle has its client cut
//     off just before it goes on to the server, which runs it with no client left to
//     tell.
//   - Disarm(): take back an arming no statement took; it says whether there was one.
//   - DropCancels(): cancel requests are dropped, so a statement cut off is left to
//     run (pgx sends one after it lost a connection mid-statement).
//   - Refuse(true): new connections are refused, no server to reach, until
//     Refuse(false).
//   - ReadyForQuery(): the round trips the server has answered, on all connections.
//
// A COMMIT is a statement that is COMMIT or END alone (with WORK or TRANSACTION or
// not, in any case, a semicolon after it or not): one that only names a commit, in a
// table's name, a string or an argument, is not. A statement holds needle, in any
// case, in its SQL text (a simple query's whole text) or in one of the arguments it
// runs with. Either is matched where a connection runs it: a simple query, or the run
// of a prepared statement, prepared then or earlier on that connection (as pgx's
// statement cache and database/sql's Stmt do), never its preparing alone. The cut
// comes at the end of the statement's round trip: the simple query, or the Sync that
// follows the statement (alone, or in a batch). CutReplyTo and CutCommitReply drop
// what the server had not sent when the statement ran: PostgreSQL holds its answers
// until the round trip's end or a Flush message, so the answers to statements before
// it in the round trip pass only when a Flush came between them and it, as a crash
// would lose them.
//
// A proxy still armed when the test ends (no statement took the arming) fails the
// test: the loss it was armed for never came. Disarm takes back an arming that may
// rightly go untaken.
type Proxy = pgtest.Proxy

// PostgresProxy starts a Proxy to the server of dsn (say, [PostgresDSN]'s) and
// returns the same DSN through it, with sslmode=disable: the proxy reads the
// protocol's frames. The proxy stops when tb ends.
//
// The proxy reaches one server over TCP: the one dsn's host (or hostaddr) and port
// name, or, as libpq, lib/pq and pgx read a DSN, PGHOST and PGPORT when dsn names
// none, then localhost and 5432. A dsn it cannot reach so (a list of hosts, a Unix
// socket's directory) fails tb at once, saying why without quoting dsn (it may hold
// a password), rather than give a DSN whose every connection is lost.
func PostgresProxy(tb testing.TB, dsn string) (*Proxy, string) {
	tb.Helper()
	return pgtest.NewProxy(tb, overTCP(tb, "PostgresProxy", dsn))
}

// Freezer is a TCP forwarder to a PostgreSQL server that can hang as a server does
// that stopped answering with its connections open (a hung host, a proxy whose
// backend froze): frozen, it passes nothing on, either way, closes nothing, and
// accepts new connections (a startup, a cancel request) only to hold them too.
// Thawed, it passes on what it held, in order. A program's calls are then to end with
// their contexts, as refset's do on both drivers, rather than wait for ever.
//
//   - Freeze(): hang now.
//   - FreezeAtCommit(): hang as the next COMMIT arrives, before it goes on to the
//     server, which holds the transaction open and uncommitted until the thaw.
//   - Thaw(): pass on what was held, and everything after it.
//   - Frozen(): whether it hangs.
//   - Caught(): how many connections sent something while it hung, and how many of
//     those their clients have closed since (a client that gave up on the server
//     closes its connection, and never lends it again).
//   - Close(): close every connection, as the server's end would: it frees a call
//     that still waits, so that a test that gave up on it can end.
type Freezer = pgtest.Freezer

// PostgresFreezer starts a Freezer in front of the server of dsn (say,
// [PostgresDSN]'s) and returns the same DSN through it, with sslmode=disable. The
// freezer stops when tb ends. It reaches the server as [PostgresProxy] does: one
// host over TCP, PGHOST and PGPORT or localhost and 5432 when dsn names none; a dsn
// it cannot reach so fails tb at once.
func PostgresFreezer(tb testing.TB, dsn string) (*Freezer, string) {
	tb.Helper()
	return pgtest.NewFreezer(tb, overTCP(tb, "PostgresFreezer", dsn))
}

// overTCP returns dsn as a URL that names the one server a forwarder (fn names it)
// dials over TCP in its host and port, with the defaults a client would use
// (PGHOST, PGPORT, localhost, 5432) filled in and a hostaddr moved there, so that
// the DSN through the forwarder reaches the forwarder, and the forwarder the server
// dsn names. It fails tb, without quoting dsn, when dsn names no one TCP server.
func overTCP(tb testing.TB, fn, dsn string) string {
	tb.Helper()
	asURL, _ := pgtest.Forms(tb, dsn)
	authority, _, _ := strings.Cut(strings.TrimPrefix(asURL, "postgres://"), "/")
	if _, hostPort, _ := strings.Cut(authority, "@"); strings.HasPrefix(hostPort, "%2F") || strings.HasPrefix(authority, "%2F") {
		// Forms writes a host that is a directory with its slashes escaped.
		tb.Fatalf("refsettest: %s: the DSN names a Unix socket; it reaches the server over TCP: give its host and port", fn)
	}
	u, err := url.Parse(asURL)
	if err != nil {
		tb.Fatalf("refsettest: %s: the DSN does not name one server over TCP (one host, a port or none): %v", fn, redact(err))
	}
	q := u.Query()
	host, port := u.Hostname(), u.Port()
	if addr := q.Get("hostaddr"); addr != "" {
		// libpq connects to hostaddr, not host: so must the forwarder, and the DSN
		// through it must not name the server's address.
		host = addr
		q.Del("hostaddr")
	}
	if host == "" {
		host = os.Getenv("PGHOST")
	}
	if host == "" {
		host = "localhost"
	}
	if port == "" {
		port = os.Getenv("PGPORT")
	}
	if port == "" {
		port = "5432"
	}
	switch {
	case strings.Contains(host, ",") || strings.Contains(port, ","):
		tb.Fatalf("refsettest: %s: the DSN names a list of hosts or ports; it takes one server, over TCP", fn)
	case strings.HasPrefix(host, "/") || strings.HasPrefix(host, "@"):
		tb.Fatalf("refsettest: %s: the DSN names a Unix socket; it reaches the server over TCP: give its host and port", fn)
	}
	u.Host = net.JoinHostPort(host, port)
	u.RawQuery = q.Encode()
	return u.String()
}

// redact drops the URL (and any password in it) from a *url.Error.
func redact(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}
