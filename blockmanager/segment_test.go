package blockmanager

import (
	"context"
	"fmt"
	"io/fs"
	"runtime"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/schema"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// segmentOf is the segment a stored block is in.
func segmentOf(t *testing.T, m *Manager, id string) int64 {
	t.Helper()
	var s int64
	require.NoError(t, m.db.Reader().QueryRowContext(t.Context(), m.sql(`SELECT segment FROM blocks WHERE header_signature = ?`), id).Scan(&s), id)
	return s
}

// setSegment moves blocks into a segment, as two writers extending one block at once
// would leave them, or as blocks stored before segments existed are.
func setSegment(t *testing.T, m *Manager, segment int64, ids ...string) {
	t.Helper()
	ctx := t.Context()
	require.NoError(t, refset.InTx(ctx, m.db, func(ctx context.Context, tx refset.Tx) error {
		for _, id := range ids {
			if _, err := tx.ExecContext(ctx, m.sql(`UPDATE blocks SET segment = ? WHERE header_signature = ?`), segment, id); err != nil {
				return err
			}
		}
		return nil
	}))
}

// putGenesis stores a branch of n blocks from genesis, g0000 up, held, and returns it.
func putGenesis(t *testing.T, m *Manager, n int) []Block {
	t.Helper()
	g := chain("g", NullBlockID, 0, n)
	put(t, m, g)
	return g
}

func idsOf(blocks []Block) []string {
	out := make([]string, len(blocks))
	for i, b := range blocks {
		out[i] = b.HeaderSignature
	}
	return out
}

// descending is the IDs of blocks, newest first, as a walk returns them.
func descending(blocks ...[]Block) []string {
	var out []string
	for i := len(blocks) - 1; i >= 0; i-- {
		ids := idsOf(blocks[i])
		for j := len(ids) - 1; j >= 0; j-- {
			out = append(out, ids[j])
		}
	}
	return out
}

// The segment rules: a block joins its predecessor's segment when the predecessor is
// the highest block of it, whoever stores it (Put, an overlapping Put, the
// Completer, the Completer linking a block that waited); otherwise it starts one of
// its own.
func TestSegments(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		ctx := t.Context()
		c := m.Completer()
		g := chain("g", NullBlockID, 0, 12)
		put(t, m, g[:4], g[2:8]) // the second overlaps g0002 and g0003
		receiveAll(t, c, g[8:10])
		out, err := c.Receive(ctx, g[11]) // waits for g0010
		require.NoError(t, err)
		require.True(t, out.Pending)
		main := segmentOf(t, m, "g0000")
		assert.NotEqual(t, main, segmentOf(t, m, "g0011"), "a waiting block is in a segment of its own")
		receiveAll(t, c, g[10:11])
		for _, b := range g {
			assert.Equal(t, main, segmentOf(t, m, b.HeaderSignature), "%s is on the line of its segment", b.HeaderSignature)
		}

		fork := chain("f", "g0005", 6, 3)
		put(t, m, fork)
		forked := segmentOf(t, m, "f0006")
		assert.NotEqual(t, main, forked, "a fork off the middle of a segment starts its own")
		receiveAll(t, c, chain("f", "f0008", 9, 2))
		assert.Equal(t, forked, segmentOf(t, m, "f0010"), "the fork's blocks join the fork's segment")

		put(t, m, chain("u", NullBlockID, 0, 2))
		assert.NotContains(t, []int64{main, forked, 0}, segmentOf(t, m, "u0000"), "a genesis block starts its own")

		assert.Equal(t, descending(g[:6], fork, chain("f", "f0008", 9, 2)), branch(t, m, "f0010"))
	})
}

// A segment holds whatever its writers put there: two that extended the highest
// block of a segment at once leave two branches in it, and blocks stored before
// segments existed are all in segment 0, forks and all. Walks pass over the other
// branches' blocks, whether a page holds many of the walk's blocks or few.
func TestWalksPassOverOtherBranchesInTheirSegment(t *testing.T) {
	for _, pageSize := range []int{1, 3, 7, 1000} {
		t.Run(fmt.Sprintf("page=%d", pageSize), func(t *testing.T) {
			eachDB(t, Config{PageSize: pageSize}, func(t *testing.T, m *Manager) {
				ctx := t.Context()
				g := chain("g", NullBlockID, 0, 40)
				a := chain("a", "g0019", 20, 30)
				b := chain("b", "g0019", 20, 25)
				c := chain("c", "a0029", 30, 5) // a fork off fork a
				put(t, m, g, a, b, c)
				check := func(t *testing.T) {
					t.Helper()
					assert.Equal(t, descending(g), branch(t, m, "g0039"))
					assert.Equal(t, descending(g[:20], a), branch(t, m, "a0049"))
					assert.Equal(t, descending(g[:20], b), branch(t, m, "b0044"))
					assert.Equal(t, descending(g[:20], a[:10], c), branch(t, m, "c0034"))
					diff, err := m.BranchDiff(ctx, "a0049", "b0044")
					require.NoError(t, err)
					assert.Equal(t, descending(a), ids(diff))
					diff, err = m.BranchDiff(ctx, "c0034", "a0049")
					require.NoError(t, err)
					assert.Equal(t, descending(c), ids(diff))
					diff, err = m.BranchDiff(ctx, "g0039", "c0034")
					require.NoError(t, err)
					assert.Equal(t, descending(g[20:]), ids(diff))
					common, err := m.CommonAncestor(ctx, "b0044", "c0034")
					require.NoError(t, err)
					assert.Equal(t, "g0019", common.HeaderSignature)
				}
				t.Run("own segments", check)

				// Fork a's writer and the main line's both joined g0019's segment.
				setSegment(t, m, segmentOf(t, m, "g0000"), idsOf(a)...)
				t.Run("two branches in one segment", check)

				// Stored before segments existed: one segment for all.
				all := append(append(append(idsOf(g), idsOf(a)...), idsOf(b)...), idsOf(c)...)
				setSegment(t, m, 0, all...)
				t.Run("segment 0", check)
			})
		})
	}
}

// Writers that extend the same block at once may all join its segment; the walks
// stay right. On Postgres the writers' first transactions all put their first
// blocks before any commits, so all join; SQLite's one writer takes them in turn.
func TestRacingForksKeepWalksRight(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		ctx := t.Context()
		hold := m.Blocks().Hold("t", 0)
		g := chain("g", NullBlockID, 0, 10)
		put(t, m, g)
		const writers = 6
		_, concurrent := m.drv.(refsetdriver.TxLocks)
		forks := make([][]Block, writers)
		var wg, put sync.WaitGroup
		put.Add(writers)
		errs := make(chan error, writers)
		for i := range forks {
			forks[i] = chain(fmt.Sprintf("w%d-", i), "g0009", 10, 50)
			wg.Go(func() {
				err := refset.InTx(ctx, m.db, func(ctx context.Context, tx refset.Tx) error {
					_, err := m.PutTx(ctx, tx, forks[i][:10], hold)
					if concurrent {
						put.Done()
						put.Wait() // every writer has put, none has committed
					}
					return err
				})
				for start := 10; err == nil && start < 50; start += 10 {
					_, err = m.Put(ctx, forks[i][start:start+10], hold)
				}
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		joined := count(t, m, `SELECT COUNT(*) FROM blocks WHERE segment = ? AND block_num = 10`, segmentOf(t, m, "g0000"))
		if concurrent {
			require.Equal(t, writers, joined, "every writer joined the main segment")
		} else {
			require.Equal(t, 1, joined, "the first writer joined the main segment")
		}
		for i, f := range forks {
			assert.Equal(t, descending(g, f), branch(t, m, f[49].HeaderSignature))
			diff, err := m.BranchDiff(ctx, f[49].HeaderSignature, forks[(i+1)%writers][20].HeaderSignature)
			require.NoError(t, err)
			assert.Equal(t, descending(f), ids(diff))
		}
	})
}

// migrateBeforeSegments creates blockmanager's first schema in db, the one before
// segments existed, and returns db's driver.
func migrateBeforeSegments(t *testing.T, db refset.Database) refsetdriver.Driver {
	t.Helper()
	drv, err := refsetdriver.Of(db)
	require.NoError(t, err)
	dir, err := fs.Sub(migrations, "sql/"+drv.Name())
	require.NoError(t, err)
	first, err := fs.ReadFile(dir, "0001_blocks.sql")
	require.NoError(t, err)
	m, err := schema.New(db, schema.Config{Components: []schema.Component{
		{Name: "blockmanager", Migrations: fstest.MapFS{"0001_blocks.sql": {Data: first}}}}})
	require.NoError(t, err)
	_, err = m.Migrate(t.Context(), schema.DirectionUp, nil)
	require.NoError(t, err)
	return drv
}

// A database of blocks stored before segments existed (blockmanager's first schema)
// is migrated on Open: its blocks are in segment 0, the walks read them, and new
// blocks extend them.
func TestBlocksStoredBeforeSegments(t *testing.T) {
	testdb.Each(t, testdb.All(), func(t *testing.T, b testdb.Backend) {
		ctx := t.Context()
		db := b.Open(t, testdb.Options{})
		drv := migrateBeforeSegments(t, db)
		g := chain("g", NullBlockID, 0, 30)
		f := chain("f", "g0009", 10, 15)
		require.NoError(t, refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
			for _, b := range append(append([]Block{}, g...), f...) {
				var ref any
				if b.PreviousBlockID != NullBlockID {
					ref = b.PreviousBlockID
				}
				if _, err := tx.ExecContext(ctx, drv.Rebind(`INSERT INTO blocks (header_signature, previous_block_id, previous_block_ref, block_num, batch_ids, transaction_ids, payload)
					VALUES (?, ?, ?, ?, ?, ?, ?)`), b.HeaderSignature, b.PreviousBlockID, ref, b.BlockNum, `["x"]`, `["y"]`, b.Payload); err != nil {
					return err
				}
			}
			return nil
		}))

		m := openManager(t, db, Config{})
		assert.Equal(t, 45, count(t, m, `SELECT COUNT(*) FROM blocks WHERE segment = 0`))
		assert.Equal(t, descending(g), branch(t, m, "g0029"))
		assert.Equal(t, descending(g[:10], f), branch(t, m, "f0024"))
		more := chain("g", "g0029", 30, 5)
		put(t, m, more)
		assert.Equal(t, descending(g, more), branch(t, m, "g0034"))
		diff, err := m.BranchDiff(ctx, "g0034", "f0024")
		require.NoError(t, err)
		assert.Equal(t, descending(g[10:], more), ids(diff))
	})
}

// A page the branch fills is followed by one twice as large, up to 16 times the
// first: a walk that stops early has read at most about as much again as it used.
func TestWalkPagesGrow(t *testing.T) {
	eachDB(t, Config{PageSize: 5}, func(t *testing.T, m *Manager) {
		putGenesis(t, m, 400)
		w := m.walk(context.Background(), "g0399", false)
		walked, sizes := walkAll(t, w, func(used int) {
			assert.LessOrEqual(t, used+len(w.page), 2*used+5, "read beyond what was used")
		})
		assert.Len(t, walked, 400)
		assert.Equal(t, []int{5, 10, 20, 40, 80, 80, 80, 80}, sizes[:8])
	})
}

// walkAll walks w to its end and returns the IDs it yields and the size of each page
// it read; onPage, if not nil, runs when a page was read, with the blocks yielded so
// far.
func walkAll(t *testing.T, w *walker, onPage func(used int)) (walked []string, sizes []int) {
	t.Helper()
	for {
		before := w.size
		b, err := w.next()
		require.NoError(t, err)
		if b == nil {
			return walked, sizes
		}
		walked = append(walked, b.HeaderSignature)
		if len(w.page)+1 == before { // a page was read for this block
			sizes = append(sizes, before)
			if onPage != nil {
				onPage(len(walked))
			}
		}
	}
}

// A segment page of at least two parts' worth of heights below the block the walk
// reached is read in two parts at once, the upper heights and the rest: the walk
// yields the same blocks, and its pages grow as they would in one part. Pages
// smaller than two parts are read whole.
func TestWalkReadsLongPagesInTwoParts(t *testing.T) {
	eachDB(t, Config{PageSize: 8}, func(t *testing.T, m *Manager) {
		g := putGenesis(t, m, 300)
		walk := func() *walker {
			w := m.walk(t.Context(), "g0299", false)
			walked, sizes := walkAll(t, w, nil)
			assert.Equal(t, descending(g), walked)
			assert.Equal(t, []int{8, 16, 32, 64, 128}, sizes[:5], "page sizes")
			return w
		}
		w := walk()
		if runtime.GOMAXPROCS(0) > 1 {
			assert.Equal(t, 2*w.pages, w.parts, "every page in two parts")
		} else {
			assert.Equal(t, w.pages, w.parts, "pages in one part, Go running on one core")
		}

		m.pagePart = 8 * maxPageGrowth
		w = walk()
		assert.Equal(t, w.pages, w.parts, "pages in one part")
	})
}

// Where a segment holds many branches at the heights of a walk (blocks stored
// before segments existed, forks and all, are in segment 0), a page by segment
// yields few of the walk's blocks, and the walker reads the next page by links: a
// page a query, however crowded the segment.
func TestWalkReadsCrowdedSegmentsByLinks(t *testing.T) {
	const pageSize, length, forks = 10, 100, 20
	eachDB(t, Config{PageSize: pageSize}, func(t *testing.T, m *Manager) {
		ctx := t.Context()
		g := chain("g", NullBlockID, 0, length)
		put(t, m, g)
		ids := idsOf(g)
		for i := range forks {
			f := chain(fmt.Sprintf("f%02d-", i), "g0000", 1, length-1)
			put(t, m, f)
			ids = append(ids, idsOf(f)...)
		}
		setSegment(t, m, 0, ids...)

		w := m.walk(ctx, "g0099", false)
		var walked []string
		for {
			b, err := w.next()
			require.NoError(t, err)
			if b == nil {
				break
			}
			walked = append(walked, b.HeaderSignature)
		}
		assert.Equal(t, descending(g), walked)
		// A page by segment, then one by links (which grow), and so on.
		assert.LessOrEqual(t, w.pages, 2*length/pageSize, "pages read")
	})
}

// A Put over a pending block: the new blocks after it join its segment, and when it
// is linked it joins its predecessor's, so the branch spans two segments and the
// walk's page of the upper one ends before the block it expects next.
func TestWalkAcrossAPutOverAPendingBlock(t *testing.T) {
	eachDB(t, Config{PageSize: 3}, func(t *testing.T, m *Manager) {
		ctx := t.Context()
		g := putGenesis(t, m, 6)
		p := chain("p", "g0005", 6, 8)
		out, err := m.Completer().Receive(ctx, p[1])
		require.NoError(t, err)
		require.True(t, out.Pending)
		put(t, m, p)

		main := segmentOf(t, m, "g0000")
		assert.Equal(t, main, segmentOf(t, m, "p0007"), "the pending block joined its predecessor's segment once linked")
		assert.NotEqual(t, main, segmentOf(t, m, "p0008"), "the blocks after it joined the segment it had then")
		assert.Equal(t, segmentOf(t, m, "p0008"), segmentOf(t, m, "p0013"))
		assert.Equal(t, descending(g, p), branch(t, m, "p0013"))
		diff, err := m.BranchDiff(ctx, "p0013", "g0003")
		require.NoError(t, err)
		assert.Equal(t, descending(g[4:], p), ids(diff))
	})
}
