package postgres

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/require"
)

// TestMultiHostDSN: Open takes a DSN that names several servers, as a
// high-availability cluster's clients use it, in both forms and on both drivers,
// and with target_session_attrs=read-write reaches the one that takes writes,
// whichever place it has in the list: here after a port nothing listens on and the
// standby of the test server. Without a primary in the list it fails with
// ErrUnavailable, as every call does during a failover until one is promoted.
func TestMultiHostDSN(t *testing.T) {
	primaryDSN, standbyDSN, _ := pgtest.NewWithStandby(t)
	primary, _ := pgtest.Forms(t, primaryDSN)
	standby, _ := pgtest.Forms(t, standbyDSN)
	pu, err := url.Parse(primary)
	require.NoError(t, err)
	su, err := url.Parse(standby)
	require.NoError(t, err)

	hosts := []string{closedAddr(t), su.Host, pu.Host}
	asURL, keyValue := multiHost(t, pu, hosts, url.Values{"target_session_attrs": {"read-write"}, "connect_timeout": {"2"}})

	// The DSN without the primary: no server takes writes, as during a failover
	// before a standby is promoted. Open fails with ErrUnavailable: it may pass.
	noPrimary := asURL
	noPrimary.Host = strings.Join(hosts[:2], ",")
	standbyOnly := asURL
	standbyOnly.Host = su.Host

	forEachDriver(t, func(t *testing.T, driver string) {
		for _, dsn := range []string{noPrimary.String(), standbyOnly.String()} {
			db, err := Open(t.Context(), dsn, Options{Driver: driver})
			if err == nil {
				db.Close()
			}
			require.ErrorIs(t, err, refset.ErrUnavailable, "no primary")
		}
		for form, dsn := range map[string]string{"url": asURL.String(), "key=value": keyValue} {
			t.Run(form, func(t *testing.T) {
				db := openWith(t, dsn, Options{Driver: driver})
				var recovering bool
				err := refset.InTx(t.Context(), db, func(ctx context.Context, tx refset.Tx) error {
					if err := tx.QueryRowContext(ctx, `SELECT pg_is_in_recovery()`).Scan(&recovering); err != nil {
						return err
					}
					_, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS multihost (id int)`)
					return err
				})
				require.NoError(t, err)
				require.False(t, recovering, "on the primary")
			})
		}
	})
}

// TestMultiHostReplicaDSN: Options.ReplicaDSN may name several servers too, in either
// form, and reaches the standby among them on both drivers, here after a port nothing
// listens on (lib/pq read a URL's list of hosts as one host's name).
func TestMultiHostReplicaDSN(t *testing.T) {
	primary, standbyDSN, _ := pgtest.NewWithStandby(t)
	standby, _ := pgtest.Forms(t, standbyDSN)
	su, err := url.Parse(standby)
	require.NoError(t, err)
	asURL, keyValue := multiHost(t, su, []string{closedAddr(t), su.Host}, url.Values{"connect_timeout": {"2"}})
	forEachDriver(t, func(t *testing.T, driver string) {
		for form, dsn := range map[string]string{"url": asURL.String(), "key=value": keyValue} {
			t.Run(form, func(t *testing.T) {
				db := openWith(t, primary, Options{Driver: driver, ReplicaDSN: dsn})
				require.NotNil(t, db.Replica(), "a replica")
				var recovering bool
				require.NoError(t, db.Replica().QueryRowContext(t.Context(), `SELECT pg_is_in_recovery()`).Scan(&recovering))
				require.True(t, recovering, "the replica reads the standby")
			})
		}
	})
}

// closedAddr is an address (host:port) nothing listens on.
func closedAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	addr := l.Addr().String()
	require.NoError(tb, l.Close())
	return addr
}

// multiHost is base, a DSN as a URL, naming hosts (host:port each) in its host's
// place and with params added to its query, in both forms: a URL, and key=value with
// base's user, password and database.
func multiHost(tb testing.TB, base *url.URL, hosts []string, params url.Values) (asURL url.URL, keyValue string) {
	tb.Helper()
	q := base.Query()
	for k, vs := range params {
		q[k] = vs
	}
	asURL = *base
	asURL.Host = strings.Join(hosts, ",")
	asURL.RawQuery = q.Encode()
	var hs, ps []string
	for _, h := range hosts {
		host, port, err := net.SplitHostPort(h)
		require.NoError(tb, err)
		hs, ps = append(hs, host), append(ps, port)
	}
	keyValue = fmt.Sprintf("host=%s port=%s", strings.Join(hs, ","), strings.Join(ps, ","))
	if base.User != nil {
		keyValue += " user=" + base.User.Username()
		if pw, ok := base.User.Password(); ok {
			keyValue += " password='" + pw + "'"
		}
	}
	keyValue += " dbname=" + strings.TrimPrefix(base.Path, "/")
	for k, vs := range q {
		keyValue += fmt.Sprintf(" %s='%s'", k, strings.ReplaceAll(vs[0], `'`, `\'`))
	}
	return asURL, keyValue
}
