package pgtest

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// errorsTB keeps the errors a cleanup reports instead of failing the test.
type errorsTB struct {
	testing.TB
	errors []string
}

func (e *errorsTB) Helper() {}

func (e *errorsTB) Errorf(format string, args ...any) {
	e.errors = append(e.errors, fmt.Sprintf(format, args...))
}

func (e *errorsTB) Fatalf(format string, args ...any) {
	e.Errorf(format, args...)
	runtime.Goexit()
}

// A role that may not end another role's sessions cannot end a transaction left
// open on its schema: the test fails saying which session held it and what the role
// needs, and the drop waits for the session (here the transaction ends after a
// while) rather than failing without a word of why.
func TestDropWithoutSignalRight(t *testing.T) {
	ctx := t.Context()
	base := baseDSN(t)
	admin := open(t, base)
	weak := schemaPrefix + "weak_" + randomHex(4)
	for _, q := range []string{
		"CREATE ROLE " + pq.QuoteIdentifier(weak) + " LOGIN",
		"GRANT CREATE ON DATABASE " + pq.QuoteIdentifier(currentDatabase(t, admin)) + " TO " + pq.QuoteIdentifier(weak),
	} {
		_, err := admin.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	t.Cleanup(func() {
		_, err := admin.ExecContext(context.Background(), "DROP OWNED BY "+pq.QuoteIdentifier(weak)+"; DROP ROLE "+pq.QuoteIdentifier(weak))
		assert.NoError(t, err)
	})
	asWeak, err := asUser(base, weak)
	require.NoError(t, err)
	t.Setenv(EnvDSN, asWeak)

	rec := &errorsTB{}
	var schema string
	start := time.Now()
	t.Run("inner", func(t *testing.T) {
		rec.TB = t
		_, schema = New(rec)
		// The superuser's transaction, which the weak role may not end: it ends by
		// itself, a while after the test.
		leak, err := admin.BeginTx(context.Background(), nil)
		require.NoError(t, err)
		_, err = leak.ExecContext(ctx, "CREATE TABLE "+pq.QuoteIdentifier(schema)+".leaked (id int)")
		require.NoError(t, err)
		time.AfterFunc(holdGrace+time.Second, func() { _ = leak.Rollback() })
	})
	require.Len(t, rec.errors, 1, "%q", rec.errors)
	for _, want := range []string{schema, "cannot terminate pid ", "pg_signal_backend", EnvDSN} {
		assert.Contains(t, rec.errors[0], want)
	}
	assert.Less(t, time.Since(start), dropTimeout, "the drop waited for the transaction's end, no longer")
	var left int
	require.NoError(t, admin.QueryRowContext(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, schema).Scan(&left))
	assert.Zero(t, left, "schema dropped once the transaction ended")
}

func currentDatabase(t *testing.T, db *sql.DB) string {
	t.Helper()
	var name string
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT current_database()`).Scan(&name))
	return name
}
