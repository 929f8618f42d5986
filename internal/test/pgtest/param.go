package pgtest

import (
	"net/url"
	"testing"
)

// WithParam is dsn, a URL or a key=value connection string, with the connection
// parameter key set to value (a search_path, an application_name), replacing one
// dsn has: lib/pq and pgx send a parameter they do not know themselves to the server,
// so every connection opened from the result starts with it.
func WithParam(tb testing.TB, dsn, key, value string) string {
	tb.Helper()
	out, err := rewrite(dsn, "the DSN", func(u *url.URL) {
		q := u.Query()
		q.Set(key, value)
		u.RawQuery = q.Encode()
	}, key+"="+quote(value))
	if err != nil {
		tb.Fatal(err)
	}
	return out
}
