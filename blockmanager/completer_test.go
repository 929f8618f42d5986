package blockmanager

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/test/child"
	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func receiveAll(t *testing.T, c *Completer, blocks []Block) (completed int) {
	t.Helper()
	for _, b := range blocks {
		out, err := c.Receive(t.Context(), b)
		require.NoError(t, err, b.HeaderSignature)
		completed += out.Completed
	}
	return completed
}

func head(t *testing.T, m *Manager) string {
	t.Helper()
	h, err := m.Controller().Head(t.Context())
	require.NoError(t, err)
	return h
}

func forks(t *testing.T, m *Manager) []string {
	t.Helper()
	fs, err := m.Controller().Forks(t.Context())
	require.NoError(t, err)
	var out []string
	for id := range fs {
		out = append(out, id)
	}
	return out
}

// Committed history needs no reference rows of its own: the chain's links keep it.
func TestReferenceTablesDoNotGrowWithTheChain(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		assert.Equal(t, 300, receiveAll(t, m.Completer(), chain("g", NullBlockID, 0, 300)))
		assert.Equal(t, "g0299", head(t, m))
		assert.Equal(t, 1, count(t, m, `SELECT COUNT(*) FROM chain_heads`))
		assert.Zero(t, count(t, m, `SELECT COUNT(*) FROM pending_blocks`))
		assert.Zero(t, count(t, m, `SELECT COUNT(*) FROM blocks_holds`))
		collect(t, m)
		assert.Equal(t, 300, count(t, m, `SELECT COUNT(*) FROM blocks`), "the committed chain survives clean-up")
	})
}

func TestCompleterOutOfOrder(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		ctx := t.Context()
		c := m.Completer()
		blocks := chain("g", NullBlockID, 0, 20)
		for i := len(blocks) - 1; i >= 1; i-- {
			out, err := c.Receive(ctx, blocks[i])
			require.NoError(t, err)
			assert.True(t, out.Pending)
		}
		waiting, missing, err := c.Pending(ctx)
		require.NoError(t, err)
		assert.Equal(t, 19, waiting)
		assert.Equal(t, []string{"g0000"}, missing, "the one block to ask peers for")
		assert.Empty(t, head(t, m))
		collect(t, m)
		assert.Equal(t, 19, count(t, m, `SELECT COUNT(*) FROM blocks`), "pending rows keep waiting blocks")

		out, err := c.Receive(ctx, blocks[0])
		require.NoError(t, err)
		assert.Equal(t, 20, out.Completed, "genesis completes everything that waited")
		assert.Equal(t, "g0019", head(t, m))
		assert.Zero(t, count(t, m, `SELECT COUNT(*) FROM pending_blocks`))
		assert.Zero(t, count(t, m, `SELECT COUNT(*) FROM blocks WHERE previous_block_ref IS NULL AND previous_block_id <> ?`, NullBlockID))

		out, err = c.Receive(ctx, blocks[7])
		require.NoError(t, err)
		assert.True(t, out.Duplicate)

		bad := chain("x", "g0019", 25, 1)[0]
		_, err = c.Receive(ctx, bad)
		require.ErrorIs(t, err, ErrBrokenChain)
	})
}

func TestForkChoice(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		c := m.Completer()
		receiveAll(t, c, chain("g", NullBlockID, 0, 6)) // g0000..g0005
		assert.Equal(t, "g0005", head(t, m))

		receiveAll(t, c, chain("f", "g0002", 3, 3)) // f0003..f0005: as long, but "f" < "g"
		assert.Equal(t, "f0005", head(t, m), "equal length: the lower ID wins")
		assert.ElementsMatch(t, []string{"g0005"}, forks(t, m), "the old head's chain is now a fork")

		receiveAll(t, c, chain("g", "g0005", 6, 1)) // g0006 extends the fork past f
		assert.Equal(t, "g0006", head(t, m))
		assert.ElementsMatch(t, []string{"f0005"}, forks(t, m), "g0005 is kept by its successor's link now")

		receiveAll(t, c, chain("h", "g0001", 2, 2)) // a short fork stays a fork
		assert.Equal(t, "g0006", head(t, m))
		assert.ElementsMatch(t, []string{"f0005", "h0003"}, forks(t, m))

		require.NoError(t, m.Controller().Commit(t.Context(), "h0003"))
		assert.Equal(t, "h0003", head(t, m))
		assert.ElementsMatch(t, []string{"f0005", "g0006"}, forks(t, m))
	})
}

// Forks says when each fork head leaves the cache: ForkTTL after it became one, by
// the database's clock, on every database (SQLite keeps the expiry as a number).
func TestForksExpireAfterForkTTL(t *testing.T) {
	const ttl = 7 * time.Minute
	eachDB(t, Config{ForkTTL: ttl}, func(t *testing.T, m *Manager) {
		c := m.Completer()
		receiveAll(t, c, chain("g", NullBlockID, 0, 4))
		before := time.Now()
		receiveAll(t, c, chain("f", "g0001", 2, 1)) // f0002: a fork head
		after := time.Now()
		fs, err := m.Controller().Forks(t.Context())
		require.NoError(t, err)
		require.Contains(t, fs, "f0002")
		assert.WithinRange(t, fs["f0002"], before.Add(ttl-time.Second), after.Add(ttl+time.Second))
	})
}

// Committing a block that extends the head makes no fork of the old head: a node
// that commits every block keeps an empty fork cache. Only an abandoned head is a
// fork.
func TestCommitExtendingTheHeadMakesNoFork(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		ctx := t.Context()
		cc := m.Controller()
		g := chain("g", NullBlockID, 0, 12)
		put(t, m, g)
		for _, b := range g[:10] {
			require.NoError(t, cc.Commit(ctx, b.HeaderSignature))
			assert.Empty(t, forks(t, m), "after committing %s", b.HeaderSignature)
		}
		require.NoError(t, cc.Commit(ctx, "g0011"), "skipping a block still extends the head")
		assert.Empty(t, forks(t, m))

		f := chain("f", "g0004", 5, 2)
		put(t, m, f)
		require.NoError(t, cc.Commit(ctx, "f0006"))
		assert.ElementsMatch(t, []string{"g0011"}, forks(t, m), "the abandoned head is a fork")
		require.NoError(t, cc.Commit(ctx, "g0011"))
		assert.ElementsMatch(t, []string{"f0006"}, forks(t, m), "back on g: g0011 is committed, no fork")
		assert.Equal(t, "g0011", head(t, m))
	})
}

// A fork head that the committed chain comes to pass through leaves the fork cache.
func TestCommitThroughAForkHeadDropsItsForkHold(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		ctx := t.Context()
		c := m.Completer()
		receiveAll(t, c, chain("g", NullBlockID, 0, 6))
		receiveAll(t, c, chain("f", "g0002", 3, 2)) // f0004: a fork head
		require.ElementsMatch(t, []string{"f0004"}, forks(t, m))
		put(t, m, chain("f", "f0004", 5, 3))
		require.NoError(t, m.Controller().Commit(ctx, "f0007"))
		assert.ElementsMatch(t, []string{"g0005"}, forks(t, m), "f0004 is committed history now")
	})
}

// A fork that stops growing loses its place in the fork cache, and clean-up prunes
// it down to the committed chain.
func TestStaleForksArePruned(t *testing.T) {
	eachDB(t, Config{ForkTTL: 50 * time.Millisecond}, func(t *testing.T, m *Manager) {
		c := m.Completer()
		receiveAll(t, c, chain("g", NullBlockID, 0, 10))
		receiveAll(t, c, chain("f", "g0004", 5, 3))
		assert.Equal(t, 13, count(t, m, `SELECT COUNT(*) FROM blocks`))
		require.Eventually(t, func() bool {
			collect(t, m)
			return count(t, m, `SELECT COUNT(*) FROM blocks`) == 10
		}, 10*time.Second, 20*time.Millisecond)
		assert.Zero(t, count(t, m, `SELECT COUNT(*) FROM blocks WHERE header_signature LIKE 'f%'`))
		assert.Equal(t, "g0009", head(t, m))
		assert.Len(t, branch(t, m, "g0009"), 10)
	})
}

// A new process on the same database carries on: forking off a deep committed block
// needs nothing that was in the old process's memory.
func TestForkOffDeepBlockAfterRestart(t *testing.T) {
	testdb.Each(t, testdb.All(), func(t *testing.T, b testdb.Backend) {
		where := b.New(t)
		first := openManager(t, where.Open(t, testdb.Options{}), Config{})
		receiveAll(t, first.Completer(), chain("g", NullBlockID, 0, 200))

		second := openManager(t, where.Open(t, testdb.Options{}), Config{})
		out, err := second.Completer().Receive(t.Context(), chain("f", "g0005", 6, 1)[0])
		require.NoError(t, err)
		assert.Equal(t, 1, out.Completed)
		assert.Equal(t, "g0199", head(t, second))
		assert.Equal(t, []string{"f0006"}, forks(t, second))
		diff, err := second.BranchDiff(t.Context(), "g0199", "f0006")
		require.NoError(t, err)
		assert.Len(t, diff, 194, "g0006..g0199")
		common, err := second.CommonAncestor(t.Context(), "g0199", "f0006")
		require.NoError(t, err)
		assert.Equal(t, "g0005", common.HeaderSignature)
	})
}

// TestMain runs a node of TestHandOverSurvivesKill9 in a process started as one.
func TestMain(m *testing.M) {
	child.Main(m, map[string]func(arg string) int{"node": child.JSON(nodeProcess)})
}

// nodePlace is the database a node process opens, as JSON: the backend's name and
// where the test's database is (testdb.Place).
type nodePlace struct {
	Backend string
	At      string
}

// crashBlocks is what the node receives: a chain of 150 blocks with two forks,
// delivered in shuffled windows, so many blocks wait for their predecessor.
func crashBlocks() []Block {
	blocks := chain("g", NullBlockID, 0, 150)
	blocks = append(blocks, chain("f", "g0040", 41, 30)...)
	blocks = append(blocks, chain("h", "g0100", 101, 20)...)
	rng := rand.New(rand.NewPCG(1, 2))
	for start := 0; start < len(blocks); start += 12 {
		w := blocks[start:min(start+12, len(blocks))]
		rng.Shuffle(len(w), func(i, j int) { w[i], w[j] = w[j], w[i] })
	}
	return blocks
}

// nodeProcess is a node: it opens the database at place and
// receives crashBlocks, until they are all in or it is killed.
func nodeProcess(place nodePlace) int {
	ctx := context.Background()
	b, _ := testdb.Named(place.Backend)
	db, err := testdb.Place{Backend: b, At: place.At}.Dial(ctx, testdb.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	m, err := Open(ctx, db, Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c := m.Completer()
	for _, b := range crashBlocks() {
		if _, err := c.Receive(ctx, b); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

// requireHandOver fails the test, saying when, unless every block is either pending
// or the controller's, and none is both. The controller's blocks are those its
// committed head or fork heads reach through the links.
func requireHandOver(t *testing.T, m *Manager, when string) {
	t.Helper()
	var both, neither int
	const reach = `WITH RECURSIVE ctl(id) AS (
		SELECT chain_head FROM chain_heads
		UNION SELECT object_id FROM blocks_holds WHERE holder = 'fork-cache'
		UNION SELECT b.previous_block_ref FROM ctl JOIN blocks b ON b.header_signature = ctl.id
		      WHERE b.previous_block_ref IS NOT NULL)
	SELECT
		(SELECT COUNT(*) FROM blocks b WHERE EXISTS (SELECT 1 FROM pending_blocks p WHERE p.block_id = b.header_signature)
		                                 AND EXISTS (SELECT 1 FROM ctl WHERE ctl.id = b.header_signature)),
		(SELECT COUNT(*) FROM blocks b WHERE NOT EXISTS (SELECT 1 FROM pending_blocks p WHERE p.block_id = b.header_signature)
		                                 AND NOT EXISTS (SELECT 1 FROM ctl WHERE ctl.id = b.header_signature))`
	require.NoError(t, m.db.Reader().QueryRowContext(t.Context(), reach).Scan(&both, &neither))
	require.Zero(t, both, "%s: blocks both pending and the controller's", when)
	require.Zero(t, neither, "%s: blocks neither pending nor the controller's", when)
}

// The crash test: a node process receiving blocks out of order is killed (SIGKILL)
// at random moments, 50 times, and restarted on the same database. After every kill,
// each stored block is either pending or the controller's, never both and never
// neither; at the end every block has been completed.
func TestHandOverSurvivesKill9(t *testing.T) {
	kills := 50
	if testing.Short() {
		kills = 10
	}
	testdb.Each(t, testdb.All(), func(t *testing.T, b testdb.Backend) {
		where := b.New(t)
		m := openManager(t, where.Open(t, testdb.Options{}), Config{})
		rng := rand.New(rand.NewPCG(3, 4))
		total := len(crashBlocks())
		place, err := json.Marshal(nodePlace{Backend: b.Name, At: where.At})
		require.NoError(t, err)
		for i := range kills {
			cmd := child.Command(t.Context(), "node", string(place))
			// One writer for both: exec.Cmd then writes to it from one goroutine at a time.
			out := &bytes.Buffer{}
			cmd.Stdout, cmd.Stderr = out, out
			require.NoError(t, cmd.Start())
			time.Sleep(time.Duration(30+rng.IntN(300)) * time.Millisecond)
			_ = cmd.Process.Signal(syscall.SIGKILL)
			err := cmd.Wait()
			if err == nil && i < kills-1 {
				t.Logf("run %d finished before its kill", i)
			} else if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() > 0 {
				t.Fatalf("node process failed: %v\n%s", err, out.String())
			}
			requireHandOver(t, m, fmt.Sprintf("after kill %d", i))
		}
		// A last run to the end completes every block.
		outBytes, err := child.Command(t.Context(), "node", string(place)).CombinedOutput()
		require.NoError(t, err, string(outBytes))
		assert.Equal(t, total, count(t, m, `SELECT COUNT(*) FROM blocks`))
		assert.Zero(t, count(t, m, `SELECT COUNT(*) FROM pending_blocks`))
		assert.Equal(t, "g0149", head(t, m))
		requireHandOver(t, m, "at the end")
	})
}

// A block whose predecessor is stored but still waiting waits too: the crash test
// found it handed to the controller while its predecessor was pending.
func TestCompleterWaitsBehindAWaitingPredecessor(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		ctx := t.Context()
		c := m.Completer()
		g := chain("g", NullBlockID, 0, 4)
		receiveAll(t, c, g[:1])
		out, err := c.Receive(ctx, g[2])
		require.NoError(t, err)
		assert.True(t, out.Pending, "g0002: g0001 is missing")
		out, err = c.Receive(ctx, g[3])
		require.NoError(t, err)
		assert.True(t, out.Pending, "g0003: g0002 is stored but waiting")
		requireHandOver(t, m, "g0002 and g0003 waiting")
		out, err = c.Receive(ctx, g[1])
		require.NoError(t, err)
		assert.Equal(t, 3, out.Completed)
		assert.Equal(t, "g0003", head(t, m))
	})
}

// Several receivers at once, each given every block in its own order: every block
// ends up completed exactly once, the head is the longest chain's, and the hand-over
// invariant holds.
func TestConcurrentReceivers(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		blocks := crashBlocks()
		const receivers = 4
		errs := make(chan error, receivers)
		var completed atomic.Int64
		for r := range receivers {
			go func() {
				order := append([]Block(nil), blocks...)
				rng := rand.New(rand.NewPCG(uint64(r), 9))
				rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
				c := m.Completer()
				for _, b := range order {
					out, err := c.Receive(t.Context(), b)
					if err != nil {
						errs <- fmt.Errorf("%s: %w", b.HeaderSignature, err)
						return
					}
					completed.Add(int64(out.Completed))
				}
				errs <- nil
			}()
		}
		for range receivers {
			require.NoError(t, <-errs)
		}
		assert.Equal(t, int64(len(blocks)), completed.Load(), "each block completed exactly once")
		assert.Zero(t, count(t, m, `SELECT COUNT(*) FROM pending_blocks`))
		assert.Equal(t, "g0149", head(t, m))
		requireHandOver(t, m, "at the end")
	})
}

// A long cascade races new children: blocks 1..300 wait for a missing genesis; one
// receiver delivers genesis (completing all 300 in one transaction) while others
// deliver a side child of each of them, and each first sees its parent still
// waiting. No block may be left waiting behind a parent that completed.
func TestCascadeRacesNewChildren(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		const n = 300
		main := chain("g", NullBlockID, 0, n+1)
		receiveAll(t, m.Completer(), main[1:])
		raceReceivers(t, m, sideChildren(main[1:], 5), func() error {
			_, err := m.Completer().Receive(t.Context(), main[0])
			return err
		})
		assert.Zero(t, count(t, m, `SELECT COUNT(*) FROM pending_blocks`), "blocks left waiting behind completed parents")
		requireHandOver(t, m, "at the end")
	})
}

// Put races receivers: one Put stores a main chain in one transaction while receivers
// deliver a side child of each of its blocks, each first finding its parent missing.
// No child may be left waiting behind a parent that Put stored.
func TestPutRacesReceivers(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		const n = 300
		main := chain("g", NullBlockID, 0, n)
		raceReceivers(t, m, sideChildren(main, 7), func() error {
			_, err := m.Put(t.Context(), main, m.Blocks().Hold("test", 0))
			return err
		})
		assert.Zero(t, count(t, m, `SELECT COUNT(*) FROM pending_blocks`), "blocks left waiting behind parents that Put stored")
		assert.Equal(t, 2*n, count(t, m, `SELECT COUNT(*) FROM blocks`))
	})
}

// sideChildren is a child of each of parents but the one that continues its chain,
// in an order shuffled by seed.
func sideChildren(parents []Block, seed uint64) []Block {
	var sides []Block
	for _, p := range parents {
		sides = append(sides, chain(fmt.Sprintf("s%04d-", p.BlockNum), p.HeaderSignature, p.BlockNum+1, 1)...)
	}
	rand.New(rand.NewPCG(seed, seed+1)).Shuffle(len(sides), func(i, j int) { sides[i], sides[j] = sides[j], sides[i] })
	return sides
}

// raceReceivers runs first while two receivers deliver a half of sides each, and
// fails the test on any of their errors.
func raceReceivers(t *testing.T, m *Manager, sides []Block, first func() error) {
	t.Helper()
	errs := make(chan error, 3)
	go func() { errs <- first() }()
	half := len(sides) / 2
	for part := range 2 {
		go func() {
			for _, b := range sides[part*half : (part+1)*half] {
				if _, err := m.Completer().Receive(t.Context(), b); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 3 {
		require.NoError(t, <-errs)
	}
}
