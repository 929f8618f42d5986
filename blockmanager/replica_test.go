package blockmanager

import (
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/internal/test/testdb"
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

	// a0000..a0009 stored; a0011 waits for a0010, unlinked.
	put(t, m, chain("a", NullBlockID, 0, 10))
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
	put(t, m, late[:1], chain("a", "a0011", 12, 3), chain("f", "a0005", 6, 3))

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

// requireCaughtUp waits, on a database with a replica, for the replica to replay
// what the primary committed: until then a read there may miss a write, or still
// find what was deleted. On any other database it does nothing.
func requireCaughtUp(t *testing.T, db refset.Database) {
	t.Helper()
	pg, ok := db.(*postgres.DB)
	if !ok || pg.Replica() == nil {
		return
	}
	caughtUp, err := pg.ReplicaCaughtUp(t.Context())
	require.NoError(t, err)
	require.True(t, caughtUp)
}

// Segment walks read the standby, and carry on from the primary wherever they would
// end short of genesis there: a tip, or rows of a segment, the paused standby has
// not replayed, and a block it has unlinked that the primary linked meanwhile (and
// moved to its predecessor's segment). Every walk returns the whole, right branch,
// and each fallback is reported.
func TestSegmentWalksOnLaggingStandby(t *testing.T) {
	t.Parallel()
	obs := &testdb.Fallbacks{}
	db := openWithStandby(t, obs)
	m := openManager(t, db, Config{PageSize: 4}) // walks of several pages
	ctx := t.Context()

	// g0000..g0019 in one segment; a fork f0010..f0014 off g0009 in one of its own;
	// x0021 waits for x0020, and x0022..x0025 are stored on it.
	g := chain("g", NullBlockID, 0, 20)
	put(t, m, g)
	f := chain("f", "g0009", 10, 5)
	put(t, m, f)
	x := chain("x", "g0019", 20, 6)
	out, err := m.Completer().Receive(ctx, x[1])
	require.NoError(t, err)
	require.True(t, out.Pending)
	put(t, m, x[2:])
	requireCaughtUp(t, db)
	obs.Take()

	assert.Equal(t, descending(g[:10], f), branch(t, m, "f0014"))
	assert.Empty(t, obs.Take(), "the standby served the walk")
	assert.Equal(t, descending(x[1:]), branch(t, m, "x0025"), "x0021 is not linked yet, on the primary too")
	assert.Equal(t, map[string]int{"branch/missing": 1}, obs.Take())

	pgtest.PauseReplay(t)
	// f grows in its segment, a fork h off f0012 starts one of its own, and x0020
	// arrives, linking x0021 and moving it into g's segment: none of it on the
	// standby.
	more := chain("f", "f0014", 15, 10)
	put(t, m, more)
	h := chain("h", "f0012", 13, 8)
	put(t, m, h)
	put(t, m, x[:1])
	require.Equal(t, segmentOf(t, m, "f0010"), segmentOf(t, m, "f0024"), "f0024 joined a segment the standby has")
	require.Equal(t, segmentOf(t, m, "g0000"), segmentOf(t, m, "x0021"))

	tests := []struct {
		tip  string
		want []string
	}{
		{"f0024", descending(g[:10], f, more)},  // a tip the standby lacks, in a segment it has
		{"h0020", descending(g[:10], f[:3], h)}, // a tip and a segment the standby lacks
		{"x0025", descending(g, x)},             // the standby's pages end at unlinked x0021
		{"f0014", descending(g[:10], f)},        // all on the standby
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, branch(t, m, tt.tip), tt.tip)
		fellBack := map[string]int{"branch/missing": 1}
		if tt.tip == "f0014" {
			fellBack = map[string]int{}
		}
		assert.Equal(t, fellBack, obs.Take(), tt.tip)
	}

	diff, err := m.BranchDiff(ctx, "f0024", "h0020")
	require.NoError(t, err)
	assert.Equal(t, descending(f[3:], more), ids(diff))
	diff, err = m.BranchDiff(ctx, "x0025", "f0014")
	require.NoError(t, err)
	assert.Equal(t, descending(g[10:], x), ids(diff))
	common, err := m.CommonAncestor(ctx, "h0020", "x0025")
	require.NoError(t, err)
	assert.Equal(t, "g0009", common.HeaderSignature)
	assert.Equal(t, map[string]int{"branch/missing": 5}, obs.Take(),
		"both walks of each, but f0014's, fell back once")
}

// A standby that has not replayed the segments' migration has no segment column:
// a walk's page fails there, and the walk reads the primary, whole and right.
func TestSegmentWalksOnStandbyBeforeTheMigration(t *testing.T) {
	t.Parallel()
	obs := &testdb.Fallbacks{}
	db := openWithStandby(t, obs)
	ctx := t.Context()
	migrateBeforeSegments(t, db)
	requireCaughtUp(t, db)

	pgtest.PauseReplay(t)
	m := openManager(t, db, Config{PageSize: 4}) // migrates to segments on the primary only
	g := chain("g", NullBlockID, 0, 12)
	put(t, m, g)
	obs.Take()

	assert.Equal(t, descending(g), branch(t, m, "g0011"))
	assert.Equal(t, map[string]int{"branch/failed": 1}, obs.Take())
	common, err := m.CommonAncestor(ctx, "g0011", "g0005")
	require.NoError(t, err)
	assert.Equal(t, "g0005", common.HeaderSignature)
	assert.Equal(t, map[string]int{"branch/failed": 2}, obs.Take())
}
