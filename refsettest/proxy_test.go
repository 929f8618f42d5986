package refsettest_test

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/refsetdb/refset/refsettest"
)

// forwarders are the two fixtures that put a forwarder between a test and its
// server; each returns the DSN through it and how many round trips it saw pass (-1:
// it does not count them).
var forwarders = []struct {
	name  string
	start func(tb testing.TB, dsn string) (through string, rounds func() int64)
}{
	{"PostgresProxy", func(tb testing.TB, dsn string) (string, func() int64) {
		p, through := refsettest.PostgresProxy(tb, dsn)
		return through, p.ReadyForQuery
	}},
	{"PostgresFreezer", func(tb testing.TB, dsn string) (string, func() int64) {
		_, through := refsettest.PostgresFreezer(tb, dsn)
		return through, func() int64 { return -1 }
	}},
}

// A forwarder reaches the server a client would reach with the same DSN: a DSN with
// no port (or no host) means PGPORT (PGHOST), as libpq, lib/pq and pgx read it, and
// hostaddr is the address connected to, host only a name. A forwarder that dialled
// "host" with no port, or the name in host, lost every connection through it, and the
// test saw only EOFs.
func TestForwarderReachesTheServerOfTheDSN(t *testing.T) {
	u, err := url.Parse(refsettest.PostgresDSN(t))
	require.NoError(t, err, "PostgresDSN returns a URL")
	host, port := u.Hostname(), u.Port()
	require.NotEmpty(t, port, "%s's DSN names its port", refsettest.EnvPostgres)
	rest := "user=" + u.User.Username() + " dbname=" + strings.TrimPrefix(u.Path, "/") + " sslmode=disable"
	if p, ok := u.User.Password(); ok {
		rest += " password='" + p + "'"
	}

	cases := []struct {
		name, dsn    string
		pghost, port string // PGHOST and PGPORT
	}{
		{"URL", u.String(), "", ""},
		{"no port: PGPORT", "host=" + host + " " + rest, "", port},
		{"no host, no port: PGHOST, PGPORT", rest, host, port},
		{"hostaddr", "host=server.invalid hostaddr=" + host + " port=" + port + " " + rest, "", ""},
	}
	for _, fw := range forwarders {
		for _, c := range cases {
			t.Run(fw.name+"/"+c.name, func(t *testing.T) {
				setenv(t, "PGHOST", c.pghost)
				setenv(t, "PGPORT", c.port)
				through, rounds := fw.start(t, c.dsn)
				assert.NotContains(t, through, "hostaddr", "the DSN through the forwarder must not send its client to the server's address")
				db, err := sql.Open("postgres", through)
				require.NoError(t, err)
				t.Cleanup(func() { _ = db.Close() })
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				var one int
				require.NoError(t, db.QueryRowContext(ctx, `SELECT 1`).Scan(&one), "a query through the forwarder")
				if n := rounds(); n >= 0 {
					assert.Positive(t, n, "the query went through the forwarder")
				}
			})
		}
	}
}

// A DSN a forwarder cannot reach over TCP (a list of hosts, a Unix socket) fails the
// test at once, saying why, and never quotes the DSN, which may hold a password.
// Before, a list of hosts gave a DSN whose every connection was lost, and a Unix
// socket failed quoting the password.
func TestForwarderRefusesWhatItCannotReach(t *testing.T) {
	cases := []struct{ name, dsn, says string }{
		{"host list", "host=127.0.0.1,127.0.0.2 port=5432 user=u password=hunter2 dbname=d", "list of hosts"},
		{"host list, URL", "postgres://u:hunter2@127.0.0.1:5432,127.0.0.2:5432/d", "one server over TCP"},
		{"port list", "host=127.0.0.1 port=5432,5433 user=u password=hunter2 dbname=d", "one server over TCP"},
		{"Unix socket", "host=/var/run/postgresql port=5432 user=u password=hunter2 dbname=d", "Unix socket"},
		{"Unix socket, URL", "postgres://u:hunter2@/d?host=/var/run/postgresql", "Unix socket"},
	}
	for _, fw := range forwarders {
		for _, c := range cases {
			t.Run(fw.name+"/"+c.name, func(t *testing.T) {
				rec, returned := run(t, func(tb testing.TB) { fw.start(tb, c.dsn) })
				require.False(t, returned, "%s returned a DSN through a forwarder that reaches no server", fw.name)
				require.True(t, rec.fatal)
				msg := strings.Join(rec.errors, "\n")
				assert.Contains(t, msg, c.says)
				assert.NotContains(t, msg, "hunter2", "the failure quotes the DSN's password")
			})
		}
	}
}

// setenv sets the variable key to value, or unsets it when value is "", for the
// test's time.
func setenv(t *testing.T, key, value string) {
	t.Setenv(key, value) // restores it at the end
	if value == "" {
		require.NoError(t, os.Unsetenv(key))
	}
}
