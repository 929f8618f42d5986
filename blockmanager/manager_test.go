package blockmanager

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/internal/test/testlog"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// branch collects a Branch walk's IDs.
func branch(t *testing.T, m *Manager, tip string) []string {
	t.Helper()
	var out []string
	for b, err := range m.Branch(t.Context(), tip) {
		require.NoError(t, err)
		out = append(out, b.HeaderSignature)
	}
	return out
}

func TestPutAndRelease(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		tip := put(t, m, chain("a", NullBlockID, 0, 5))
		assert.Equal(t, "a0004", tip.ID())
		assert.Equal(t, []string{"a0004", "a0003", "a0002", "a0001", "a0000"}, branch(t, m, "a0004"))

		// Releasing the only reference drops the whole chain.
		rel, err := tip.Release(m.Blocks().Unhold("t"))
		require.NoError(t, err)
		acq, err := rel.Acquire()
		require.NoError(t, err)
		_, err = acq.Complete(t.Context())
		require.NoError(t, err)
		collect(t, m)
		assert.Zero(t, count(t, m, `SELECT COUNT(*) FROM blocks`))
		assert.Zero(t, count(t, m, `SELECT COUNT(*) FROM block_batches`), "index rows go with their blocks")
	})
}

func TestBranchesSharingAnAncestor(t *testing.T) {
	eachDBAndStandby(t, Config{}, func(t *testing.T, m *Manager) {
		ctx := t.Context()
		blocks := m.Blocks()
		_, err := m.Put(ctx, chain("m", NullBlockID, 0, 4), blocks.Hold("main", 0))
		require.NoError(t, err)
		a, err := m.Put(ctx, chain("x", "m0001", 2, 3), blocks.Hold("fork-x", 0))
		require.NoError(t, err)
		_, err = m.Put(ctx, chain("y", "m0001", 2, 2), blocks.Hold("fork-y", 0))
		require.NoError(t, err)
		assert.Equal(t, []string{"x0004", "x0003", "x0002", "m0001", "m0000"}, branch(t, m, "x0004"))

		rel, _ := a.Release(blocks.Unhold("fork-x"))
		acq, _ := rel.Acquire()
		_, err = acq.Complete(ctx)
		require.NoError(t, err)
		collect(t, m)
		requireCaughtUp(t, m.Database()) // Get reads the standby, which may not have replayed the deletes
		got, err := m.Get(ctx, []string{"x0002", "x0003", "x0004", "m0001", "y0003", "m0003"})
		require.NoError(t, err)
		assert.Equal(t, []string{"", "", "", "m0001", "y0003", "m0003"}, ids(got), "only fork x went, down to the shared m0001")
	})
}

func TestPutErrors(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		ctx := t.Context()
		_, err := m.Put(ctx, chain("g", NullBlockID, 0, 2))
		require.NoError(t, err)
		broken := chain("b", "g0001", 2, 3)
		broken[2].PreviousBlockID = "elsewhere"
		badNum := chain("n", "g0001", 2, 2)
		badNum[1].BlockNum = 9
		badGenesis := chain("z", NullBlockID, 1, 1)
		tests := []struct {
			name   string
			branch []Block
			want   []error
		}{
			{"empty", nil, []error{ErrEmptyBranch}},
			{"missing predecessor", chain("o", "absent", 5, 2), []error{ErrMissingPredecessor, refset.ErrNotFound}},
			{"does not chain", broken, []error{ErrBrokenChain}},
			{"wrong number", badNum, []error{ErrBrokenChain}},
			{"wrong number after a stored predecessor", chain("w", "g0001", 7, 1), []error{ErrBrokenChain}},
			{"genesis not numbered 0", badGenesis, []error{ErrBrokenChain}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				_, err := m.Put(ctx, tc.branch)
				for _, want := range tc.want {
					require.ErrorIs(t, err, want)
				}
				assert.Equal(t, 2, count(t, m, `SELECT COUNT(*) FROM blocks`), "nothing stored")
			})
		}
	})
}

func TestGetAndContains(t *testing.T) {
	eachDBAndStandby(t, Config{}, func(t *testing.T, m *Manager) {
		ctx := t.Context()
		put(t, m, chain("g", NullBlockID, 0, 3))
		got, err := m.Get(ctx, []string{"nope", "g0002", "g0000", "also-nope"})
		require.NoError(t, err)
		assert.Equal(t, []string{"", "g0002", "g0000", ""}, ids(got))
		assert.Equal(t, IDs{"batch-g0002"}, got[1].BatchIDs)
		assert.Equal(t, IDs{"txn-g0002"}, got[1].TransactionIDs)
		assert.Equal(t, "g0001", *got[1].PreviousBlockRef)
		assert.Nil(t, got[2].PreviousBlockRef, "genesis links to nothing")
		ok, err := m.Contains(ctx, "g0001")
		require.NoError(t, err)
		assert.True(t, ok)
		ok, err = m.Contains(ctx, "nope")
		require.NoError(t, err)
		assert.False(t, ok)
	})
}

func TestIdempotentAndOverlappingPut(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		ctx := t.Context()
		first := chain("c", NullBlockID, 0, 4)
		put(t, m, first)
		_, err := m.Put(ctx, first, m.Blocks().Hold("t", 0))
		require.NoError(t, err, "putting the same branch again")
		assert.Equal(t, 4, count(t, m, `SELECT COUNT(*) FROM blocks`))

		// A branch whose first blocks exist and whose last are new keeps the
		// existing ones as they are (Sawtooth's put miscounted the existing parent).
		overlap := chain("c", "c0001", 2, 5)
		overlap[0].Payload = []byte("a different payload for a stored block")
		tip, err := m.Put(ctx, overlap, m.Blocks().Hold("t", 0))
		require.NoError(t, err)
		assert.Equal(t, "c0006", tip.ID())
		assert.Equal(t, 7, count(t, m, `SELECT COUNT(*) FROM blocks`))
		got, err := m.Get(ctx, []string{"c0002"})
		require.NoError(t, err)
		assert.Equal(t, []byte("c0002"), got[0].Payload, "the stored block was kept")
		assert.Equal(t, []string{"c0006", "c0005", "c0004", "c0003", "c0002", "c0001", "c0000"}, branch(t, m, "c0006"))
		assert.Equal(t, 1, count(t, m, `SELECT COUNT(*) FROM block_batches WHERE batch_id = ?`, "batch-c0002"))
	})
}

func TestBranchDiff(t *testing.T) {
	eachDBAndStandby(t, Config{}, func(t *testing.T, m *Manager) {
		ctx := t.Context()
		// g0000..g0009, then fork a from g0004 (a0005..a0019) and fork b from g0004
		// (b0005..b0011), and the main line goes on to g0009.
		put(t, m, chain("g", NullBlockID, 0, 10), chain("a", "g0004", 5, 15), chain("b", "g0004", 5, 7))

		diff := func(tip, exclude string) []string {
			d, err := m.BranchDiff(ctx, tip, exclude)
			require.NoError(t, err)
			return ids(d)
		}
		rng := func(prefix string, from, to int) []string { // descending
			var out []string
			for i := to; i >= from; i-- {
				out = append(out, chain(prefix, "", int64(i), 1)[0].HeaderSignature)
			}
			return out
		}
		assert.Equal(t, rng("a", 5, 19), diff("a0019", "b0011"), "longer tip against shorter fork")
		assert.Equal(t, rng("b", 5, 11), diff("b0011", "a0019"), "shorter tip against longer fork")
		assert.Empty(t, diff("g0002", "a0019"), "tip is an ancestor of exclude")
		assert.Equal(t, rng("a", 12, 19), diff("a0019", "a0011"), "exclude is an ancestor of tip")
		assert.Equal(t, rng("a", 5, 19), diff("a0019", "g0009"))
		assert.Empty(t, diff("a0010", "a0010"))

		common, err := m.CommonAncestor(ctx, "a0019", "b0008")
		require.NoError(t, err)
		assert.Equal(t, "g0004", common.HeaderSignature)

		_, err = m.BranchDiff(ctx, "unknown", "a0019")
		require.ErrorIs(t, err, ErrUnknownBlock)
		_, err = m.BranchDiff(ctx, "a0019", "unknown")
		require.ErrorIs(t, err, refset.ErrNotFound)
		for _, err := range m.Branch(ctx, "unknown") {
			require.ErrorIs(t, err, ErrUnknownBlock)
		}

		// Two unrelated chains share nothing.
		put(t, m, chain("u", NullBlockID, 0, 3))
		assert.Equal(t, rng("u", 0, 2), diff("u0002", "g0009"))
		common, err = m.CommonAncestor(ctx, "u0002", "g0009")
		require.NoError(t, err)
		assert.Nil(t, common)
	})
}

func TestContainsAnyBatchesAndTransactions(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		ctx := t.Context()
		put(t, m, chain("g", NullBlockID, 0, 6), chain("f", "g0002", 3, 3))
		tests := []struct {
			tip  string
			ids  []string
			want bool
		}{
			{"g0005", []string{"batch-g0001"}, true},
			{"g0005", []string{"batch-f0004"}, false},
			{"f0005", []string{"batch-f0004", "nope"}, true},
			{"f0005", []string{"batch-g0004"}, false},
			{"f0005", []string{"batch-g0002"}, true},
			{"g0001", []string{"batch-g0003"}, false},
			{"g0005", []string{"nope"}, false},
			{"g0005", nil, false},
			// The branch before genesis is empty (Sawtooth's own tests).
			{NullBlockID, []string{"batch-g0000"}, false},
			{NullBlockID, nil, false},
		}
		for _, tc := range tests {
			got, err := m.ContainsAnyBatches(ctx, tc.tip, tc.ids)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got, "batches %v from %s", tc.ids, tc.tip)
			txns := make([]string, len(tc.ids))
			for i, id := range tc.ids {
				txns[i] = strings.Replace(id, "batch-", "txn-", 1)
			}
			got, err = m.ContainsAnyTransactions(ctx, tc.tip, txns)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got, "transactions %v from %s", txns, tc.tip)
		}
		_, err := m.ContainsAnyBatches(ctx, "unknown", []string{"batch-g0001"})
		require.ErrorIs(t, err, ErrUnknownBlock)
	})
}

// A branch may overlap the Completer's pending blocks: Put stores what is missing,
// and the blocks that waited for it are linked and handed to the controller in the
// same transaction, as if the Completer had received their predecessor.
func TestPutOverlapsPendingBlocks(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		ctx := t.Context()
		c := m.Completer()
		receiveAll(t, c, chain("g", NullBlockID, 0, 2)) // g0000, g0001: committed
		p := chain("p", "g0001", 2, 4)                  // p0002..p0005
		for _, b := range []Block{p[1], p[2], p[3]} {   // all wait for p0002
			out, err := c.Receive(ctx, b)
			require.NoError(t, err)
			require.True(t, out.Pending, b.HeaderSignature)
		}
		other := chain("q", "p0003", 4, 1)[0] // waits for p0003 too: a fork off a pending block
		out, err := c.Receive(ctx, other)
		require.NoError(t, err)
		require.True(t, out.Pending)

		tip, err := m.Put(ctx, p[:2], m.Blocks().Hold("t", 0)) // p0002 is new, p0003 pending
		require.NoError(t, err)
		assert.Equal(t, "p0003", tip.ID())

		waiting, missing, err := c.Pending(ctx)
		require.NoError(t, err)
		assert.Zero(t, waiting, "every block that waited for p0002 was completed")
		assert.Empty(t, missing)
		assert.Equal(t, "p0005", head(t, m), "the completed blocks were handed to the controller")
		assert.ElementsMatch(t, []string{"q0004"}, forks(t, m))
		assert.Equal(t, []string{"p0005", "p0004", "p0003", "p0002", "g0001", "g0000"}, branch(t, m, "p0005"))
		assert.Equal(t, []string{"q0004", "p0003", "p0002", "g0001", "g0000"}, branch(t, m, "q0004"))
		assert.Equal(t, 1, count(t, m, `SELECT COUNT(*) FROM blocks_holds WHERE holder = 't' AND object_id = 'p0003'`),
			"the caller's command ran on the tip")

		// Putting the same branch again changes nothing.
		put(t, m, p)
		assert.Equal(t, "p0005", head(t, m))
		assert.Equal(t, 7, count(t, m, `SELECT COUNT(*) FROM blocks`))
	})
}

// A block Put stores on its own completes what waited for it in the Completer too:
// the Completer will not see that block arrive again.
func TestPutCompletesBlocksWaitingForItsBlocks(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		ctx := t.Context()
		c := m.Completer()
		g := chain("g", NullBlockID, 0, 3)
		out, err := c.Receive(ctx, g[2])
		require.NoError(t, err)
		require.True(t, out.Pending)

		put(t, m, g[:2])
		waiting, _, err := c.Pending(ctx)
		require.NoError(t, err)
		assert.Zero(t, waiting)
		assert.Equal(t, "g0002", head(t, m))
		out, err = c.Receive(ctx, g[2])
		require.NoError(t, err)
		assert.True(t, out.Duplicate)
	})
}

// A Command given to Put that panics leaves nothing stored and no transaction open:
// the panic goes on with its own value, and the same Put succeeds after.
func TestPutWithPanickingCommand(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		ctx := t.Context()
		blocks := m.Blocks()
		val := &struct{ name string }{"hook"}
		hook := refset.CommandFunc[string](func(context.Context, refset.Tx, string) error { panic(val) })
		got := func() (p any) {
			defer func() { p = recover() }()
			_, _ = m.Put(ctx, chain("a", NullBlockID, 0, 3), blocks.Hold("test", 0), hook)
			return nil
		}()
		require.Same(t, val, got)
		assert.Zero(t, count(t, m, `SELECT COUNT(*) FROM blocks`), "the panicking Put stored nothing")

		quick, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		tip, err := m.Put(quick, chain("a", NullBlockID, 0, 3), blocks.Hold("test", 0))
		require.NoError(t, err, "no transaction was left open")
		assert.Equal(t, "a0002", tip.ID())
	})
}

// A read cut short by its context's deadline says so: lib/pq reports the cancelled
// statement as the server's 57014, which must still match context.DeadlineExceeded.
// Another session's exclusive lock on the blocks table holds the reads until the
// deadline passes.
func TestReadsReportTheirDeadline(t *testing.T) {
	ctx := t.Context()
	db := testdb.LibPQ.Open(t, testdb.Options{})
	m := openManager(t, db, Config{})
	_, err := m.Put(ctx, chain("a", NullBlockID, 0, 3), m.Blocks().Hold("test", 0))
	require.NoError(t, err)

	pgtest.DeadlinesUnderLock(t, db.(*postgres.DB).Pool().DB, "blocks", map[string]func(ctx context.Context) error{
		"Get": func(ctx context.Context) error { _, err := m.Get(ctx, []string{"a0002"}); return err },
		"Branch": func(ctx context.Context) error {
			for _, err := range m.Branch(ctx, "a0002") {
				if err != nil {
					return err
				}
			}
			return nil
		},
		"BranchDiff": func(ctx context.Context) error { _, err := m.BranchDiff(ctx, "a0002", "a0000"); return err },
		"ContainsAnyBatches": func(ctx context.Context) error {
			_, err := m.ContainsAnyBatches(ctx, "a0002", []string{"x"})
			return err
		},
		"Head": func(ctx context.Context) error { _, err := m.Controller().Head(ctx); return err },
	})
}

// Config.Logger receives the block tables' clean-up passes.
func TestLoggerReceivesCleanUp(t *testing.T) {
	log, out := testlog.New(slog.LevelDebug)
	eachDB(t, Config{Logger: log}, func(t *testing.T, m *Manager) {
		_, err := m.Collector().Collect(t.Context())
		require.NoError(t, err)
		assert.Contains(t, out.String(), `msg="refset/cleanup: collected" table=blocks`)
	})
}

// A branch longer than the look-up's chunks of a thousand IDs, over a pending block
// whose predecessor is in the chunk before its own: the block is completed once.
func TestLongPutOverAPendingBlock(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		ctx := t.Context()
		g := chain("g", NullBlockID, 0, 1500)
		out, err := m.Completer().Receive(ctx, g[1000])
		require.NoError(t, err)
		require.True(t, out.Pending)
		put(t, m, g)
		assert.Zero(t, count(t, m, `SELECT COUNT(*) FROM pending_blocks`))
		assert.Equal(t, "g1000", head(t, m), "the waiting block was handed to the controller")
		assert.Len(t, branch(t, m, "g1499"), 1500)
	})
}

// Put reads the pending blocks whole when they are fewer than the branch's blocks,
// and looks up the branch's by ID when there are more: a block waiting for the
// branch is completed however many others wait for something else.
func TestPutCompletesAWaiterAmongManyPending(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		ctx := t.Context()
		c := m.Completer()
		put(t, m, chain("g", NullBlockID, 0, 2))
		for _, b := range chain("a", "missing", 10, 5) { // all wait, for blocks never put
			out, err := c.Receive(ctx, b)
			require.NoError(t, err)
			require.True(t, out.Pending)
		}
		child := chain("z", "x0002", 3, 1)[0] // sorts after the others
		out, err := c.Receive(ctx, child)
		require.NoError(t, err)
		require.True(t, out.Pending)

		put(t, m, chain("x", "g0001", 2, 1))
		assert.Zero(t, count(t, m, `SELECT COUNT(*) FROM pending_blocks WHERE block_id = ?`, "z0003"), "the waiter was completed")
		assert.Equal(t, 5, count(t, m, `SELECT COUNT(*) FROM pending_blocks`))
		assert.Equal(t, []string{"z0003", "x0002", "g0001", "g0000"}, branch(t, m, "z0003"))
	})
}
