package refsettest

import (
	"testing"

	"github.com/refsetdb/refset/internal/test/pgtest"
)

// Proxy stands between a test and its PostgreSQL server, passing everything through
// until armed to lose a connection at the moment a crash or a failover would hurt
// most: CutCommitReply (the transaction commits, its client hears only the loss),
// CutReplyTo (a statement that commits on its own runs to its end, its client hears
// only the loss), CutAfterCommitSent and CutAfterSent (the server runs the statement
// with no client left to tell), Refuse (no server to reach). With it a test checks what its code
// does with refset.ErrUnavailable and refset.ErrCommitUnknown on a real server.
type Proxy = pgtest.Proxy

// PostgresProxy starts a Proxy to the server of dsn (say, [PostgresDSN]'s) and
// returns the same DSN through it, with sslmode=disable: the proxy reads the
// protocol's frames. The proxy stops when tb ends.
func PostgresProxy(tb testing.TB, dsn string) (*Proxy, string) {
	tb.Helper()
	return pgtest.NewProxy(tb, dsn)
}
