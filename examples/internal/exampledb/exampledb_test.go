package exampledb

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/stretchr/testify/require"
)

// An example's tables go in a database of its own, which Close removes: a new SQLite
// file in a temporary directory, or a new schema on PostgreSQL.
func TestNewOpenClose(t *testing.T) {
	for name, dsn := range map[string]func(testing.TB) string{
		"sqlite":   func(testing.TB) string { return "" },
		"postgres": pgtest.DSN, // skips without a server, fails under CI=true
	} {
		t.Run(name, func(t *testing.T) {
			pgDSN := dsn(t)
			ctx := t.Context()
			d, err := New(ctx, "test", pgDSN)
			require.NoError(t, err)
			require.Equal(t, pgDSN != "", d.Postgres())
			var pools []refset.Database
			for range 2 { // two pools on one database, as the custody example's replicas
				db, err := d.Open(ctx, 2)
				require.NoError(t, err)
				pools = append(pools, db)
			}
			require.NoError(t, refset.InTx(ctx, pools[0], func(ctx context.Context, tx refset.Tx) error {
				_, err := tx.ExecContext(ctx, `CREATE TABLE items (id TEXT PRIMARY KEY)`)
				return err
			}))
			var n int
			require.NoError(t, pools[1].Reader().QueryRowContext(ctx, `SELECT COUNT(*) FROM items`).Scan(&n), "one database")
			if !d.Postgres() {
				d.Close()
				require.NoDirExists(t, filepath.Dir(d.dsn), "the temporary directory is removed")
				return
			}
			var schema string
			require.NoError(t, pools[0].Reader().QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schema))
			require.Regexp(t, `^refset_test_\d+$`, schema)
			d.Close()
			admin, err := postgres.Open(ctx, pgDSN, postgres.Options{MaxConns: 1})
			require.NoError(t, err)
			defer admin.Close()
			require.NoError(t, admin.Pool().QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = $1`, schema).Scan(&n))
			require.Zero(t, n, "the schema is dropped")
		})
	}

	existing := filepath.Join(t.TempDir(), "mine.db")
	require.NoError(t, os.WriteFile(existing, nil, 0o600))
	_, err := New(t.Context(), "test", existing)
	require.ErrorContains(t, err, "exists", "an example never writes into a file it did not make")
}
