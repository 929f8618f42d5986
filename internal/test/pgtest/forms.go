package pgtest

import (
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// Forms returns dsn, a DSN in either form libpq reads (a postgres:// URL or key=value
// pairs, as New returns it), in both: as a URL and as key=value pairs, for tests of
// code that must take each. It knows one host, as the test servers have; a DSN it
// cannot read fails tb, without quoting it (it may hold a password).
func Forms(tb testing.TB, dsn string) (asURL, keyValue string) {
	tb.Helper()
	params, err := parseDSN(dsn)
	if err != nil {
		tb.Fatalf("pgtest: read the DSN: %v", err)
	}
	return formatURL(params), formatKeyValue(params)
}

// parseDSN reads dsn's parameters.
func parseDSN(dsn string) (map[string]string, error) {
	params := map[string]string{}
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return nil, redact(err)
		}
		for k, vs := range u.Query() {
			params[k] = vs[len(vs)-1]
		}
		if u.User != nil {
			params["user"] = u.User.Username()
			if p, ok := u.User.Password(); ok {
				params["password"] = p
			}
		}
		if h := u.Hostname(); h != "" {
			params["host"] = h
		}
		if p := u.Port(); p != "" {
			params["port"] = p
		}
		if db := strings.TrimPrefix(u.Path, "/"); db != "" {
			params["dbname"] = db
		}
		return params, nil
	}
	rest := strings.TrimSpace(dsn)
	for rest != "" {
		key, after, ok := strings.Cut(rest, "=")
		key = strings.TrimSpace(key)
		if !ok || key == "" || strings.ContainsAny(key, " \t\n'") {
			return nil, fmt.Errorf("not key=value pairs")
		}
		value, tail, err := readValue(strings.TrimLeft(after, " \t\n"))
		if err != nil {
			return nil, err
		}
		params[key] = value // a later key wins, as in libpq
		rest = strings.TrimSpace(tail)
	}
	return params, nil
}

// readValue reads the value that starts s, quoted ('a b', with \' and \\) or not
// (up to a space, with \ escaping the next character), and returns what follows it.
func readValue(s string) (value, rest string, err error) {
	var b strings.Builder
	quoted := strings.HasPrefix(s, "'")
	if quoted {
		s = s[1:]
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			i++
			b.WriteByte(s[i])
		case quoted && c == '\'':
			return b.String(), s[i+1:], nil
		case !quoted && (c == ' ' || c == '\t' || c == '\n'):
			return b.String(), s[i:], nil
		default:
			b.WriteByte(c)
		}
	}
	if quoted {
		return "", "", fmt.Errorf("a quoted value is not closed")
	}
	return b.String(), "", nil
}

// formatURL writes params as a postgres:// URL.
func formatURL(params map[string]string) string {
	u := url.URL{Scheme: "postgres", Host: params["host"]}
	if port := params["port"]; port != "" {
		u.Host = net.JoinHostPort(params["host"], port)
	}
	if user, ok := params["user"]; ok {
		u.User = url.User(user)
		if p, ok := params["password"]; ok {
			u.User = url.UserPassword(user, p)
		}
	}
	if db := params["dbname"]; db != "" {
		u.Path = "/" + db
	}
	q := url.Values{}
	for k, v := range params {
		switch k {
		case "host", "port", "user", "password", "dbname":
		default:
			q.Set(k, v)
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// formatKeyValue writes params as key=value pairs, every value quoted.
func formatKeyValue(params map[string]string) string {
	var pairs []string
	for _, k := range slices.Sorted(maps.Keys(params)) {
		pairs = append(pairs, k+"="+quote(params[k]))
	}
	return strings.Join(pairs, " ")
}
