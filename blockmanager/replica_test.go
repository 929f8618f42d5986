package blockmanager

import (
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/pgtest"
	"github.com/refsetdb/refset/internal/testdb"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// eachDBAndStandby is eachDB, and the same on Postgres with a hot standby, whose
// walks read the standby.
func eachDBAndStandby(t *testing.T, cfg Config, fn func(t *testing.T, m *Manager)) {
	t.Helper()
	eachOf(t, append(testdb.All(), testdb.Standby), cfg, fn)
}

// openWithStandby opens a fresh database with a hot standby as replica, waiting long
// for the standby to catch up: other tests may pause its replay.
func openWithStandby(tb testing.TB, obs refset.Observer) *postgres.DB {
	tb.Helper()
	return testdb.Standby.Open(tb, testdb.Options{Observer: obs, ReplicaWait: 2 * time.Minute}).(*postgres.DB)
}

// Walks read the standby, and carry on from the primary wherever they would end
// short of genesis there: the standby, paused, has not replayed the newest blocks,
// nor the link a late predecessor made.
func TestWalksOnLaggingStandby(t *testing.T) {
	t.Parallel()
	obs := &testdb.Fallbacks{}
	db := openWithStandby(t, obs)
	m := openManager(t, db, Config{})
	ctx := t.Context()
	hold := m.Blocks().Hold("t", 0)

	// a0000..a0009 stored; a0011 waits for a0010, unlinked.
	_, err := m.Put(ctx, chain("a", NullBlockID, 0, 10), hold)
	require.NoError(t, err)
	late := chain("a", "a0009", 10, 2)
	out, err := m.Completer().Receive(ctx, late[1])
	require.NoError(t, err)
	require.True(t, out.Pending)
	caughtUp, err := db.ReplicaCaughtUp(ctx)
	require.NoError(t, err)
	require.True(t, caughtUp)
	obs.Take()

	walk := func(tip string) []string {
		var got []string
		for b, err := range m.Branch(ctx, tip) {
			require.NoError(t, err)
			got = append(got, b.HeaderSignature)
		}
		return got
	}
	descending := func(prefix string, from, to int) []string {
		var out []string
		for i := to; i >= from; i-- {
			out = append(out, chain(prefix, "", int64(i), 1)[0].HeaderSignature)
		}
		return out
	}
	assert.Equal(t, descending("a", 0, 9), walk("a0009"))
	assert.Equal(t, []string{"a0011"}, walk("a0011"), "not linked yet, on the primary too")
	assert.Equal(t, map[string]int{"branch/missing": 1}, obs.Take(),
		"the standby served the walks; only the unlinked end was confirmed on the primary")

	pgtest.PauseReplay(t)
	// a0010 arrives: Put links the waiting a0011 to it. Then a0012..a0014, and a
	// fork f0006..f0008 from a0005.
	_, err = m.Put(ctx, late[:1], hold)
	require.NoError(t, err)
	_, err = m.Put(ctx, chain("a", "a0011", 12, 3), hold)
	require.NoError(t, err)
	_, err = m.Put(ctx, chain("f", "a0005", 6, 3), hold)
	require.NoError(t, err)

	assert.Equal(t, descending("a", 0, 11), walk("a0011"), "a0011 is linked on the primary")
	assert.Equal(t, descending("a", 0, 14), walk("a0014"), "a tip the standby has not replayed")
	diff, err := m.BranchDiff(ctx, "a0014", "f0008")
	require.NoError(t, err)
	assert.Equal(t, descending("a", 6, 14), ids(diff))
	common, err := m.CommonAncestor(ctx, "f0008", "a0014")
	require.NoError(t, err)
	assert.Equal(t, "a0005", common.HeaderSignature)
	blocks, err := m.Get(ctx, []string{"a0014", "f0006"})
	require.NoError(t, err)
	assert.Equal(t, []string{"a0014", "f0006"}, ids(blocks))
	assert.NotEmpty(t, obs.Take())
}
