package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/store"
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
	db := openWith(tb, dsn, Options{})
	ledger := def + "_ledger"
	_, err := db.Pool().ExecContext(tb.Context(), `CREATE SCHEMA `+ledger)
	require.NoError(tb, err)
	tb.Cleanup(func() {
		_, err := db.Pool().ExecContext(context.Background(), `DROP SCHEMA `+ledger+` CASCADE`)
		assert.NoError(tb, err)
	})
	return db, ledger
}

// A set may live in a schema other than the connection's default; its holds table
// goes beside it.
func TestStoreInNamedSchema(t *testing.T) {
	db, ledger := withNamedSchema(t)
	ctx := t.Context()
	_, err := db.Pool().ExecContext(ctx, strings.ReplaceAll(`
		CREATE TABLE ledger.blocks (id text PRIMARY KEY, height bigint NOT NULL);
		CREATE TABLE blocks (id text PRIMARY KEY, height bigint NOT NULL)`, "ledger.", ledger+"."))
	require.NoError(t, err)

	setStore, err := store.NewStore[block, string](ctx, db, store.Config{Table: ledger + ".blocks"})
	require.NoError(t, err)
	set := refset.New(setStore)
	_, err = set.Add(ctx, block{Hash: "a", Height: 1}, set.Hold("keeper", 0))
	require.NoError(t, err)

	var inLedger, inDefault int
	require.NoError(t, db.Pool().GetContext(ctx, &inLedger, `SELECT count(*) FROM `+ledger+`.blocks_holds`))
	require.NoError(t, db.Pool().GetContext(ctx, &inDefault, `SELECT count(*) FROM blocks`))
	assert.Equal(t, 1, inLedger)
	assert.Equal(t, 0, inDefault, "the unqualified table of the same name is untouched")

	err = refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM `+ledger+`.blocks WHERE id = 'a'`)
		return err
	})
	require.ErrorIs(t, err, refset.ErrReferenced)
}

// A DEFERRABLE foreign key fails at COMMIT, where no statement says which side
// failed: the error is still classified, from the server's detail.
func TestDeferredForeignKeyAtCommit(t *testing.T) {
	forEachDriver(t, func(t *testing.T, driver string) { testDeferredForeignKeyAtCommit(t, driver) })
}

func testDeferredForeignKeyAtCommit(t *testing.T, driver string) {
	db := openWith(t, pgtest.DSN(t), Options{Driver: driver})
	ctx := t.Context()
	_, err := db.Pool().ExecContext(ctx, `
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
			err := refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
				_, err := tx.ExecContext(ctx, tc.stmt)
				return err // succeeds: the check waits for COMMIT
			})
			require.ErrorIs(t, err, tc.want)
		})
	}
	var n int
	require.NoError(t, db.Pool().GetContext(ctx, &n, `SELECT count(*) FROM blocks`))
	assert.Equal(t, 1, n)
}

// Reads outside a transaction run prepared statements. A migration that changes a
// mapped column's type makes Postgres refuse the old ones ("cached plan must not
// change result type"); the store prepares them again instead of failing every read
// on every connection that had one.
func TestReadsSurviveColumnTypeChange(t *testing.T) {
	db := openWith(t, pgtest.DSN(t), Options{})
	ctx := t.Context()
	_, err := db.Pool().ExecContext(ctx, `CREATE TABLE blocks (id text PRIMARY KEY, height integer NOT NULL)`)
	require.NoError(t, err)
	setStore, err := store.NewStore[block, string](ctx, db, store.Config{Table: "blocks"})
	require.NoError(t, err)
	require.NoError(t, setStore.Persist(ctx, db.Pool(), block{Hash: "a", Height: 1}))
	for _, step := range []string{"", `ALTER TABLE blocks ALTER COLUMN height TYPE bigint`} {
		if step != "" {
			_, err := db.Pool().ExecContext(ctx, step)
			require.NoError(t, err)
		}
		for range 3 { // enough to reuse a pooled connection's statement
			got, err := setStore.Get(ctx, db.Reader(), "a")
			require.NoError(t, err, "after %q", step)
			assert.Equal(t, block{Hash: "a", Height: 1}, got)
			found, err := setStore.Has(ctx, db.Reader(), "a")
			require.NoError(t, err)
			assert.True(t, found)
		}
	}
	found, err := setStore.Has(ctx, db.Reader(), "b")
	require.NoError(t, err)
	assert.False(t, found)
}

// A store's writes in a transaction its database began run as statements prepared on
// that database's pool (one round trip each instead of lib/pq's two), also inside
// refset.InTx, which hands units of work the transaction wrapped. Any other
// transaction, one of another pool or the caller's own *sqlx.Tx, runs them unprepared.
func TestWritesPreparedInOwnTransactions(t *testing.T) {
	dsn := pgtest.DSN(t)
	db, other := openWith(t, dsn, Options{}), openWith(t, dsn, Options{})
	ctx := t.Context()
	set := newBlocks(t, db)

	// prepared reports whether the insert is prepared on q's connection.
	prepared := func(q refset.Querier) bool {
		t.Helper()
		var n int
		require.NoError(t, q.QueryRowContext(ctx,
			`SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE 'INSERT INTO "blocks"%'`).Scan(&n))
		return n > 0
	}
	require.NoError(t, refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
		_, err := set.AddTx(ctx, tx, block{Hash: "a", Height: 1}, set.Hold("me", 0))
		require.NoError(t, err)
		assert.True(t, prepared(tx), "refset's own transaction runs the prepared insert")
		return nil
	}))

	// Options.Unprepared: nothing is prepared, not even in the database's own
	// transactions, nor reads.
	plain, err := Open(ctx, dsn, Options{MaxConns: 1, Unprepared: true}) // one connection: the one the read used
	require.NoError(t, err)
	t.Cleanup(func() { plain.Close() })
	plainStore, err := store.NewStore[block, string](ctx, plain, store.Config{Table: "blocks"})
	require.NoError(t, err)
	plainSet := refset.New(plainStore)
	require.NoError(t, refset.InTx(ctx, plain, func(ctx context.Context, tx refset.Tx) error {
		_, err := plainSet.AddTx(ctx, tx, block{Hash: "c", Height: 3}, plainSet.Hold("me", 0))
		require.NoError(t, err)
		assert.False(t, prepared(tx), "Unprepared: the insert is not prepared")
		return nil
	}))
	_, err = plainStore.Get(ctx, plain.Reader(), "c")
	require.NoError(t, err)
	var n int
	require.NoError(t, plain.Pool().GetContext(ctx, &n, `SELECT count(*) FROM pg_prepared_statements`))
	assert.Zero(t, n, "Unprepared: reads are not prepared either")

	for name, begin := range map[string]func() (refsetdriver.DatabaseTx, error){
		"another pool": func() (refsetdriver.DatabaseTx, error) { return other.Begin(ctx) },
		"the caller's *sqlx.Tx": func() (refsetdriver.DatabaseTx, error) {
			conns, err := sqlx.Open("postgres", dsn)
			if err != nil {
				return nil, err
			}
			t.Cleanup(func() { conns.Close() })
			return conns.BeginTxx(ctx, nil)
		},
	} {
		t.Run(name, func(t *testing.T) {
			tx, err := begin()
			require.NoError(t, err)
			defer tx.Rollback()
			_, err = set.AddTx(ctx, tx, block{Hash: "b", Height: 2}, set.Hold("me", 0))
			require.NoError(t, err)
			assert.False(t, prepared(tx), "a foreign transaction runs the insert unprepared")
			var n int
			require.NoError(t, tx.QueryRowContext(ctx, `SELECT count(*) FROM blocks_holds WHERE object_id = 'b'`).Scan(&n))
			assert.Equal(t, 1, n)
		})
	}
}

// newBlocks makes the table blocks on db and a set on it.
func newBlocks(t *testing.T, db *DB) *refset.RefSet[block, string] {
	t.Helper()
	_, err := db.Pool().ExecContext(t.Context(), `CREATE TABLE blocks (id text PRIMARY KEY, height bigint NOT NULL)`)
	require.NoError(t, err)
	setStore, err := store.NewStore[block, string](t.Context(), db, store.Config{Table: "blocks"})
	require.NoError(t, err)
	return refset.New(setStore)
}
