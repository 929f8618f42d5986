package postgres

import (
	"strings"
	"testing"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A set in a schema of its own, dropped with CASCADE and made again, while refset's
// bookkeeping (refset_schema_version, refset_sets) stays in the default schema and
// still records the set's holds table: NewStore makes the holds table and review
// queue again instead of failing with 42P01.
func TestSchemaDroppedAndMadeAgain(t *testing.T) {
	db, ledger := withNamedSchema(t)
	ctx := t.Context()
	exec := func(q string) {
		t.Helper()
		_, err := db.Pool().ExecContext(ctx, strings.ReplaceAll(q, "ledger", ledger))
		require.NoError(t, err, q)
	}
	exec(`CREATE TABLE ledger.blocks (id text PRIMARY KEY, height bigint NOT NULL)`)
	for round := range 2 {
		setStore, err := store.NewStore[block, string](ctx, db, store.Config{Table: ledger + ".blocks"})
		require.NoError(t, err, "round %d", round)
		set := refset.New(setStore)
		_, err = set.Add(ctx, block{Hash: "a", Height: 1}, set.Hold("keeper", 0))
		require.NoError(t, err, "round %d", round)
		var held int
		require.NoError(t, db.Pool().GetContext(ctx, &held, `SELECT count(*) FROM `+ledger+`.blocks_holds`))
		assert.Equal(t, 1, held)

		exec(`DROP SCHEMA ledger CASCADE`)
		exec(`CREATE SCHEMA ledger`)
		exec(`CREATE TABLE ledger.blocks (id text PRIMARY KEY, height bigint NOT NULL)`)
	}
}
