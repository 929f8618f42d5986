package tokens

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// On a dialect whose folder has lock_rows.sql (Postgres, whose rows lock one by one),
// the general path, a Select with a Predicate, skips a token whose row another
// transaction has locked rather than wait for that transaction: with nothing else to
// take it loses the race at once and says the funds are locked; once the row is free
// it takes the token.
func TestGeneralPathSkipsRowsLockedByOthers(t *testing.T) {
	anything := Filter{Predicate: func(Token) bool { return true }}
	eachBackend(t, []backend{libpqDB, pgxDB, libpqPooledDB, pgxPooledDB}, func(t *testing.T, b backend) {
		ctx := t.Context()
		v := openVaults(t, b, 1, Config{MaxAttempts: 1})[0]
		require.NotEmpty(t, v.lockRowsSQL, "the Postgres folder has the general path's row locks")
		issue(t, v, "lena", 5)
		var id string
		require.NoError(t, v.db.Reader().QueryRowContext(ctx, `SELECT id FROM tokens WHERE owner = 'lena'`).Scan(&id))

		other, err := v.drv.Pool().BeginTx(ctx, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = other.Rollback() })
		_, err = other.ExecContext(ctx, `SELECT id FROM tokens WHERE id = $1 FOR UPDATE`, id)
		require.NoError(t, err)

		// Without the row locks, Select would lock the token whose row the other
		// transaction holds; the deadline bounds any wait for that row.
		impatient, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		before := v.Stats()
		_, err = v.Select(impatient, newTx(), "lena", 5, anything, time.Minute)
		require.ErrorIs(t, err, ErrLocked, "the general path waited for a row another transaction locked")
		after := v.Stats()
		assert.Equal(t, before.General+1, after.General, "a Select with a Predicate takes the general path")
		assert.Equal(t, before.LostRaces+1, after.LostRaces, "the skipped row is a race lost")

		require.NoError(t, other.Rollback())
		got, err := v.Select(ctx, newTx(), "lena", 5, anything, time.Minute)
		require.NoError(t, err)
		require.Len(t, got, 1)
		assert.Equal(t, id, got[0].TokenID)
		audit(t, v)
	})
}

// A migration that gives a fast path's function other result types (a new function
// under the old name: CREATE OR REPLACE cannot change them) makes PostgreSQL refuse
// the statement prepared before it ("cached plan must not change result type", on
// every connection it was prepared on); the statement is prepared again, once, and
// selects go on.
func TestFastPathsSurviveResultTypeChange(t *testing.T) {
	const args = `p_owner text, p_type text, p_identifier text, p_issuer text, p_notary text,
		p_amount bigint, p_pivot text, p_holder text, p_ttl_ms bigint`
	eachBackend(t, []backend{libpqDB, pgxDB}, func(t *testing.T, b backend) { // prepared
		ctx := t.Context()
		v := openVaults(t, b, 1, Config{})[0]
		require.True(t, v.fast, "the Postgres folder has the fast paths' statements")
		issue(t, v, "max", 1, 1, 1, 1, 1, 1, 1, 1)
		selectOne := func() {
			t.Helper()
			locked, err := v.Select(ctx, newTx(), "max", 1, Filter{}, time.Minute)
			require.NoError(t, err)
			require.Len(t, locked, 1)
		}
		for range 4 { // on the pool's connections, as many as it opens
			selectOne()
		}
		for _, ddl := range []string{
			`ALTER FUNCTION custody_select(` + args + `) RENAME TO custody_select_before`,
			`CREATE FUNCTION custody_select(` + args + `)
				RETURNS TABLE (verdict varchar, covered numeric, took_over bigint, expires timestamptz, tok_id varchar, tok_owner varchar,
					tok_type varchar, tok_identifier varchar, tok_issuer varchar, tok_notary varchar, tok_amount bigint)
				LANGUAGE sql AS $$ SELECT verdict::varchar, covered, took_over, expires, tok_id::varchar, tok_owner::varchar,
					tok_type::varchar, tok_identifier::varchar, tok_issuer::varchar, tok_notary::varchar, tok_amount
				FROM custody_select_before(p_owner, p_type, p_identifier, p_issuer, p_notary, p_amount, p_pivot, p_holder, p_ttl_ms) $$`,
		} {
			_, err := v.drv.Pool().ExecContext(ctx, ddl)
			require.NoError(t, err)
		}
		for range 4 {
			selectOne()
		}
		audit(t, v)
	})
}
