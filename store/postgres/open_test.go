package postgres

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// openDSN opens the database at dsn for a test in this package, closed when tb ends.
func openDSN(tb testing.TB, dsn string) *DB {
	tb.Helper()
	db, err := Open(tb.Context(), dsn, Options{MaxConns: 40})
	require.NoError(tb, err)
	tb.Cleanup(func() { db.Close() })
	return db
}
