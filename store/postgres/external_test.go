package postgres_test

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"testing"

	"github.com/lib/pq"
	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/schema"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/postgres"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type thing struct {
	Key string `db:"id"`
}

func (t thing) ID() string { return t.Key }

// appRole creates a login role that may use the test's schema and read and write its
// tables (those there now: grant after the DBA's script), but create nothing, and
// returns its DSN. The role is dropped when t ends.
func appRole(t *testing.T, admin *sql.DB, dsn, schemaName string) (roleDSN string, grant func()) {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	role := "refset_app_" + hex.EncodeToString(b)
	ctx := t.Context()
	_, err := admin.ExecContext(ctx, `CREATE ROLE `+pq.QuoteIdentifier(role)+` LOGIN PASSWORD 'app'`)
	require.NoError(t, err)
	t.Cleanup(func() {
		// Not t.Context(): it has ended. DROP OWNED takes the role's grants away.
		for _, q := range []string{`DROP OWNED BY ` + pq.QuoteIdentifier(role), `DROP ROLE ` + pq.QuoteIdentifier(role)} {
			if _, err := admin.Exec(q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})
	_, err = admin.ExecContext(ctx, `GRANT USAGE ON SCHEMA `+pq.QuoteIdentifier(schemaName)+` TO `+pq.QuoteIdentifier(role))
	require.NoError(t, err)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	u.User = url.UserPassword(role, "app")
	return u.String(), func() {
		t.Helper()
		_, err := admin.ExecContext(ctx, `GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA `+
			pq.QuoteIdentifier(schemaName)+` TO `+pq.QuoteIdentifier(role))
		require.NoError(t, err)
	}
}

// With ExternalMigrations a store runs no DDL, so a role without CREATE rights can
// use it: on a database a DBA has not migrated NewStore fails with ErrSchema, naming
// what to run, and creates nothing; once the DBA ran the script, it works.
func TestExternalMigrations(t *testing.T) {
	for _, driver := range []string{postgres.DriverLibPQ, postgres.DriverPgx} {
		t.Run(driver, func(t *testing.T) {
			ctx := t.Context()
			dsn, schemaName := pgtest.New(t)
			admin, err := postgres.Open(ctx, dsn, postgres.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { admin.Close() })
			_, err = admin.Pool().ExecContext(ctx, `CREATE TABLE things (id text PRIMARY KEY)`)
			require.NoError(t, err)
			roleDSN, grant := appRole(t, admin.Pool().DB, dsn, schemaName)
			grant()
			app, err := postgres.Open(ctx, roleDSN, postgres.Options{Driver: driver, Options: store.Options{ExternalMigrations: true}})
			require.NoError(t, err)
			t.Cleanup(func() { app.Close() })
			relations := func() []string {
				t.Helper()
				var names []string
				require.NoError(t, admin.Pool().SelectContext(ctx, &names, `SELECT relname FROM pg_class c
					JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 ORDER BY relname`, schemaName))
				return names
			}
			before := relations()

			// The role cannot create: without the option, NewStore fails at CREATE.
			plain, err := postgres.Open(ctx, roleDSN, postgres.Options{Driver: driver})
			require.NoError(t, err)
			t.Cleanup(func() { plain.Close() })
			_, err = store.NewStore[thing, string](ctx, plain, store.Config{Table: "things"})
			require.ErrorContains(t, err, "permission denied", "the role has no CREATE rights")

			_, err = store.NewStore[thing, string](ctx, app, store.Config{Table: "things"})
			require.ErrorIs(t, err, refset.ErrSchema)
			var pe *schema.PendingError
			require.ErrorAs(t, err, &pe)
			assert.Contains(t, err.Error(), "core 0 -> 2, set:things 0 -> 3")
			assert.Equal(t, before, relations(), "nothing created")

			m, err := schema.New(app, schema.Config{Sets: []schema.Set{{Table: "things"}}})
			require.NoError(t, err)
			plan, err := m.Migrate(ctx, schema.DirectionUp, &schema.MigrateOpts{DryRun: true})
			require.NoError(t, err, "a dry run needs no CREATE rights")
			script := plan.SQL()
			assert.Equal(t, script, pe.Plan.SQL(), "the error carries the same script")
			_, err = admin.Pool().ExecContext(ctx, script) // the DBA's part
			require.NoError(t, err)
			grant()

			setStore, err := store.NewStore[thing, string](ctx, app, store.Config{Table: "things"})
			require.NoError(t, err)
			rs := refset.New(setStore)
			tok, err := rs.Add(ctx, thing{Key: "a"}, rs.Hold("me", 0))
			require.NoError(t, err, "the set works on the DBA's tables")
			lease, err := rs.Get(ctx, tok)
			require.NoError(t, err)
			assert.Equal(t, "a", lease.Value().Key)
		})
	}
}
