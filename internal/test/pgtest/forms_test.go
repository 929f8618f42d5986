package pgtest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Forms writes a DSN of either form in both, each read back to the same parameters.
func TestForms(t *testing.T) {
	want := map[string]string{"host": "127.0.0.1", "port": "5432", "user": "postgres", "password": "p w'd",
		"dbname": "refset_test", "sslmode": "disable", "search_path": "refset_t_ab"}
	for name, dsn := range map[string]string{
		"URL":       "postgres://postgres:p%20w%27d@127.0.0.1:5432/refset_test?sslmode=disable&search_path=refset_t_ab",
		"key=value": `host=127.0.0.1 port=5432 user=postgres password='p w\'d' dbname=refset_test sslmode=disable search_path='refset_t_ab'`,
	} {
		t.Run(name, func(t *testing.T) {
			asURL, keyValue := Forms(t, dsn)
			for _, form := range []string{asURL, keyValue} {
				got, err := parseDSN(form)
				require.NoError(t, err, form)
				assert.Equal(t, want, got, form)
			}
			assert.Regexp(t, `^postgres://`, asURL)
		})
	}
}
