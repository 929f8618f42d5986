package pgtest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// WithParam sets a parameter in either form of DSN, replacing the one it had and
// keeping the others, whatever characters the value holds.
func TestWithParam(t *testing.T) {
	for name, dsn := range map[string]string{
		"URL":       "postgres://postgres@127.0.0.1:5432/refset_test?sslmode=disable&search_path=before",
		"key=value": "host=127.0.0.1 port=5432 user=postgres dbname=refset_test sslmode=disable search_path=before",
	} {
		t.Run(name, func(t *testing.T) {
			for _, value := range []string{"public", `it's a "path", \ too`} {
				got, err := parseDSN(WithParam(t, dsn, "search_path", value))
				require.NoError(t, err)
				assert.Equal(t, map[string]string{"host": "127.0.0.1", "port": "5432", "user": "postgres",
					"dbname": "refset_test", "sslmode": "disable", "search_path": value}, got)
			}
		})
	}
}
