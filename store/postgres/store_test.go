package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/refsetdb/refset/internal/pgtest"
	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type block struct {
	Hash   string `db:"id"`
	Height int64  `db:"height"`
}

func (b block) ID() string { return b.Hash }

// withNamedSchema opens a test database and creates a second schema beside its
// default one, named like it with "_ledger" appended and dropped when tb ends. It
// returns the database and the second schema's name.
func withNamedSchema(tb testing.TB) (*DB, string) {
	tb.Helper()
	dsn, def := pgtest.New(tb)
	db := openDSN(tb, dsn)
	ledger := def + "_ledger"
	_, err := db.Pool.ExecContext(tb.Context(), `CREATE SCHEMA `+ledger)
	require.NoError(tb, err)
	tb.Cleanup(func() {
		_, err := db.Pool.ExecContext(context.Background(), `DROP SCHEMA `+ledger+` CASCADE`)
		assert.NoError(tb, err)
	})
	return db, ledger
}

// A set may live in a schema other than the connection's default; its holds table
// goes beside it.
func TestStoreInNamedSchema(t *testing.T) {
	db, ledger := withNamedSchema(t)
	ctx := t.Context()
	_, err := db.Pool.ExecContext(ctx, strings.ReplaceAll(`
		CREATE TABLE ledger.blocks (id text PRIMARY KEY, height bigint NOT NULL);
		CREATE TABLE blocks (id text PRIMARY KEY, height bigint NOT NULL)`, "ledger.", ledger+"."))
	require.NoError(t, err)

	store, err := NewStore[block, string](ctx, db, Config{Table: ledger + ".blocks"})
	require.NoError(t, err)
	set := refset.New(store)
	_, err = set.Add(ctx, block{Hash: "a", Height: 1}, set.Hold("keeper", 0))
	require.NoError(t, err)

	var inLedger, inDefault int
	require.NoError(t, db.Pool.GetContext(ctx, &inLedger, `SELECT count(*) FROM `+ledger+`.blocks_holds`))
	require.NoError(t, db.Pool.GetContext(ctx, &inDefault, `SELECT count(*) FROM blocks`))
	assert.Equal(t, 1, inLedger)
	assert.Equal(t, 0, inDefault, "the unqualified table of the same name is untouched")

	err = refset.InTx(ctx, db, func(tx refset.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM `+ledger+`.blocks WHERE id = 'a'`)
		return err
	})
	require.ErrorIs(t, err, refset.ErrReferenced)
}

// A DEFERRABLE foreign key fails at COMMIT, where no statement says which side
// failed: the error is still classified, from the server's detail.
func TestDeferredForeignKeyAtCommit(t *testing.T) {
	db := openDSN(t, pgtest.DSN(t))
	ctx := t.Context()
	_, err := db.Pool.ExecContext(ctx, `
		CREATE TABLE blocks (id text PRIMARY KEY, height bigint NOT NULL);
		CREATE TABLE heads (block_id text PRIMARY KEY REFERENCES blocks (id) DEFERRABLE INITIALLY DEFERRED);
		INSERT INTO blocks VALUES ('a', 0);
		INSERT INTO heads VALUES ('a')`)
	require.NoError(t, err)

	tests := []struct {
		name string
		stmt string
		want error
	}{
		{"reference to a missing block", `INSERT INTO heads VALUES ('ghost')`, refset.ErrNotFound},
		{"deleting a referenced block", `DELETE FROM blocks WHERE id = 'a'`, refset.ErrReferenced},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := refset.InTx(ctx, db, func(tx refset.Tx) error {
				_, err := tx.ExecContext(ctx, tc.stmt)
				return err // succeeds: the check waits for COMMIT
			})
			require.ErrorIs(t, err, tc.want)
		})
	}
	var n int
	require.NoError(t, db.Pool.GetContext(ctx, &n, `SELECT count(*) FROM blocks`))
	assert.Equal(t, 1, n)
}

// Reads outside a transaction run prepared statements. A migration that changes a
// mapped column's type makes Postgres refuse the old ones ("cached plan must not
// change result type"); the store prepares them again instead of failing every read
// on every connection that had one.
func TestReadsSurviveColumnTypeChange(t *testing.T) {
	db := openDSN(t, pgtest.DSN(t))
	ctx := t.Context()
	_, err := db.Pool.ExecContext(ctx, `CREATE TABLE blocks (id text PRIMARY KEY, height integer NOT NULL)`)
	require.NoError(t, err)
	store, err := NewStore[block, string](ctx, db, Config{Table: "blocks"})
	require.NoError(t, err)
	require.NoError(t, store.Persist(ctx, db.Pool, block{Hash: "a", Height: 1}))
	for _, step := range []string{"", `ALTER TABLE blocks ALTER COLUMN height TYPE bigint`} {
		if step != "" {
			_, err := db.Pool.ExecContext(ctx, step)
			require.NoError(t, err)
		}
		for range 3 { // enough to reuse a pooled connection's statement
			got, err := store.Get(ctx, db.Reader(), "a")
			require.NoError(t, err, "after %q", step)
			assert.Equal(t, block{Hash: "a", Height: 1}, got)
			found, err := store.Has(ctx, db.Reader(), "a")
			require.NoError(t, err)
			assert.True(t, found)
		}
	}
	found, err := store.Has(ctx, db.Reader(), "b")
	require.NoError(t, err)
	assert.False(t, found)
}
