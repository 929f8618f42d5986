package conformance

import (
	"testing"

	"github.com/refsetdb/refset/internal/sqlstore"
	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tables dropped and made again (a test fixture reset, DROP SCHEMA ... CASCADE on
// Postgres) take refset's tables of the set with them, while refset's bookkeeping
// (refset_schema_version, refset_sets) may live elsewhere and stay, recording
// migrations whose tables are gone. A store built on the new tables makes what it
// needs again instead of failing on a missing holds table.
func testTablesDroppedAndMadeAgain(t *testing.T, h Harness) {
	e := newEnv(t, h)
	set := e.blocks(t)
	ctx := t.Context()
	_, err := set.Add(ctx, mkBlock("before", "", 0), set.Hold("keeper", 0))
	require.NoError(t, err)

	for _, table := range []string{"heads", "pending", "blocks_holds", "blocks_review", "blocks"} {
		e.mustExec(t, `DROP TABLE `+table)
	}
	e.createBlocks(t)
	store, err := newStore[block, string](ctx, e.db, sqlstore.Config{Table: "blocks"})
	require.NoError(t, err, "a store on tables made again")
	set = refset.New(store)
	tok, err := set.Add(ctx, mkBlock("after", "", 0), set.Hold("keeper", 0))
	require.NoError(t, err)
	_, err = set.Get(ctx, tok)
	require.NoError(t, err)
	assert.Equal(t, 1, e.count(t, "blocks_holds", "object_id = ?", "after"))
	assert.Equal(t, 0, e.count(t, "blocks_review", ""), "the review queue is there again")
	require.ErrorIs(t, e.exec(ctx, `DELETE FROM blocks WHERE id = ?`, "after"), refset.ErrReferenced,
		"the new holds table references the new blocks table")
}
