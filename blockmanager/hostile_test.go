package blockmanager

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// This file calls the manager as a hostile caller would: malformed and adversarial
// blocks, transactions that are none, peers that send blocks which can never be
// completed, callers racing one another on the same IDs, and walks under a
// collector. A call a caller makes fail must fail with a typed error that says what
// was wrong, and change nothing.

// stateOf is what a failed call must leave as it was: the rows of every table the
// manager writes, and the committed head.
func stateOf(tb testing.TB, m *Manager) map[string]int {
	tb.Helper()
	state := map[string]int{}
	for _, table := range []string{"blocks", "pending_blocks", "chain_heads", "blocks_holds", "block_batches", "block_transactions"} {
		state[table] = count(tb, m, `SELECT COUNT(*) FROM `+table)
	}
	return state
}

// requireRefused fails the test unless err matches every one of want, its text
// holds says, and the manager's tables are as before.
func requireRefused(tb testing.TB, m *Manager, before map[string]int, err error, says string, want ...error) {
	tb.Helper()
	require.Error(tb, err)
	for _, w := range want {
		require.ErrorIs(tb, err, w)
	}
	assert.Contains(tb, err.Error(), says, "the error says what was wrong")
	assert.Equal(tb, before, stateOf(tb, m), "a refused call changes nothing")
}

// eachChain runs fn on SQLite and on PostgreSQL (pgx) with a fresh manager that holds
// the chain g0000 to g(n-1), committed: the fixture of the tests of the branches off
// it that Put and PutTx refuse.
func eachChain(t *testing.T, n int, fn func(t *testing.T, m *Manager)) {
	t.Helper()
	eachOf(t, []testdb.Backend{testdb.SQLite, testdb.Pgx}, Config{}, func(t *testing.T, m *Manager) {
		put(t, m, chain("g", NullBlockID, 0, n))
		fn(t, m)
	})
}

// putTxAsCaller runs PutTx of branch with cmds in a unit of work as a caller does that
// goes on after the refusals PutTx's doc says come before it writes anything
// (ErrBrokenChain, ErrInvalidCommand): it commits then, and must commit nothing of the
// branch; after any other error it rolls back. It returns PutTx's error.
func putTxAsCaller(ctx context.Context, tb testing.TB, m *Manager, branch []Block, cmds ...refset.Command[string]) error {
	tb.Helper()
	var putErr error
	err := refset.InTx(ctx, m.db, func(ctx context.Context, tx refset.Tx) error {
		_, putErr = m.PutTx(ctx, tx, branch, cmds...)
		if errors.Is(putErr, ErrBrokenChain) || errors.Is(putErr, refset.ErrInvalidCommand) {
			return nil // found before PutTx writes: the caller may commit
		}
		return putErr
	})
	if errors.Is(putErr, ErrBrokenChain) || errors.Is(putErr, refset.ErrInvalidCommand) {
		require.NoError(tb, err, "the caller's commit after PutTx's refusal")
	}
	return putErr
}

// Blocks no chain can hold are refused, by Put and by Receive alike, before anything
// is written: an empty or malformed ID is ErrInvalidID, a block that cannot follow
// its predecessor ErrBrokenChain. Before, a block named "" or NullBlockID, waiting
// for "" or for itself, or numbered 0 after a predecessor, was stored and waited
// forever (nothing could ever complete it), and SQLite stored IDs that are not UTF-8,
// changing the batch IDs it read back.
func TestHostileBlocksAreRefused(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		ctx := t.Context()
		put(t, m, chain("g", NullBlockID, 0, 3))
		block := func(id, prev string, num int64) Block {
			return Block{HeaderSignature: id, PreviousBlockID: prev, BlockNum: num}
		}
		withBatch := func(b Block, batch string) Block { b.BatchIDs = IDs{batch}; return b }
		tests := []struct {
			name  string
			block Block // alone, to Receive and to Put; and as the last of a branch from g0002
			says  string
			want  []error
		}{
			{"empty header signature", block("", "g0002", 3), "header signature is empty", []error{refset.ErrInvalidID}},
			{"empty header signature, predecessor missing", block("", "absent", 7), "header signature is empty", []error{refset.ErrInvalidID}},
			{"empty previous block ID", block("e", "", 3), `block "e": its previous block ID is empty`, []error{refset.ErrInvalidID}},
			{"named NullBlockID", block(NullBlockID, "g0002", 3), "NullBlockID", []error{refset.ErrInvalidID}},
			{"genesis named NullBlockID", block(NullBlockID, NullBlockID, 0), "NullBlockID", []error{refset.ErrInvalidID}},
			{"own predecessor", block("self", "self", 3), `"self" is its own previous block`, []error{ErrBrokenChain}},
			{"own predecessor, numbered after it", block("g0003", "g0003", 3), "its own previous block", []error{ErrBrokenChain}},
			{"numbered 0 after a block", block("z", "absent", 0), "z has number 0", []error{ErrBrokenChain}},
			{"numbered below 0", block("neg", "absent", -4), "neg has number -4", []error{ErrBrokenChain}},
			{"genesis not numbered 0", block("gen", NullBlockID, 2), "genesis block gen has number 2", []error{ErrBrokenChain}},
			{"NUL in the header signature", block("a\x00b", "g0002", 3), "header signature", []error{refset.ErrInvalidID}},
			{"header signature not UTF-8", block("a\xffb", "g0002", 3), "header signature", []error{refset.ErrInvalidID}},
			{"previous block ID not UTF-8", block("p", "g\xff", 3), "previous block ID", []error{refset.ErrInvalidID}},
			{"batch ID not UTF-8", withBatch(block("b", "g0002", 3), "batch\xff"), "batch ID", []error{refset.ErrInvalidID}},
			{"transaction ID with NUL", Block{HeaderSignature: "x", PreviousBlockID: "g0002", BlockNum: 3, TransactionIDs: IDs{"t\x00"}},
				"transaction ID", []error{refset.ErrInvalidID}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				before := stateOf(t, m)
				_, err := m.Completer().Receive(ctx, tc.block)
				requireRefused(t, m, before, err, tc.says, tc.want...)
				_, err = m.Put(ctx, []Block{tc.block})
				requireRefused(t, m, before, err, tc.says, tc.want...)
				// Last of a branch, after blocks that are fine: nothing of it is stored.
				_, err = m.Put(ctx, append(chain("h", "g0002", 3, 2), tc.block))
				requireRefused(t, m, before, err, tc.says, tc.want...)
				assert.Equal(t, before, stateOf(t, m))
			})
		}
	})
}

// A branch that holds a block twice does not chain: ErrBrokenChain, naming it, and
// nothing stored. Before, it was the database's ErrDuplicate, after writing.
func TestPutRefusesABranchHoldingABlockTwice(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		a, b := chain("a", NullBlockID, 0, 1)[0], chain("b", "a0000", 1, 1)[0]
		again := a
		again.PreviousBlockID, again.BlockNum = "b0001", 2
		twice := a
		twice.PreviousBlockID, twice.BlockNum = "a0000", 1
		for name, branch := range map[string][]Block{
			"a, b, a": {a, b, again},
			"a, a":    {a, twice},
		} {
			t.Run(name, func(t *testing.T) {
				before := stateOf(t, m)
				_, err := m.Put(t.Context(), branch)
				requireRefused(t, m, before, err, "a0000", ErrBrokenChain)
				assert.NotErrorIs(t, err, refset.ErrDuplicate)
			})
		}
	})
}

// PutTx refuses what is not a transaction with ErrInvalidTx, as its doc says, and
// writes nothing. Before, a nil transaction panicked (a nil pointer), and a pool took
// the blocks' writes, each committing on its own, before the error.
func TestPutTxRefusesWhatIsNoTransaction(t *testing.T) {
	testdb.Each(t, testdb.All(), func(t *testing.T, b testdb.Backend) {
		db := b.Open(t, testdb.Options{CallersPools: true})
		m := openManager(t, db, Config{})
		pool := testdb.PoolsOf(t, db).Writer
		for name, tx := range map[string]refset.Tx{
			"nil":             nil,
			"nil *sql.Tx":     (*sql.Tx)(nil),
			"connection pool": pool,
		} {
			t.Run(name, func(t *testing.T) {
				before := stateOf(t, m)
				var err error
				require.NotPanics(t, func() { _, err = m.PutTx(t.Context(), tx, chain("g", NullBlockID, 0, 3)) })
				requireRefused(t, m, before, err, "transaction", refset.ErrInvalidTx)
			})
		}
	})
}

// A branch that holds a block otherwise than it is stored, and a block after it, is
// refused with ErrBrokenChain, by Put and by PutTx, naming how it is stored: the
// block after it must follow the stored block as it is stored, or the chain would
// hold numbers that repeat or skip, and the walks that stop at a height go wrong on
// it. That holds of a block the branch names with a number or predecessor other than
// the stored one's, and of a block the Completer received, numbered so that it cannot
// follow the branch's block before it. PutTx refuses before it writes anything, as
// its doc promises of that error, so a caller that commits after it commits nothing.
//
// Before, Put stored y numbered 4 after g0004, itself numbered 4, and
// CommonAncestor(y, g0005) answered g0003, not g0004; the test's red message was
// `Expected error with "blockmanager: blocks do not chain" in chain but got nil`.
// Before, with a received block still waiting, PutTx wrote the branch's new blocks
// and only then failed linking the waiting one ("p has number 7 after a's 3"), and
// the caller's commit stored a (blocks 4 -> 5). A stray the Completer discarded
// (unlinked, pending no more) is refused by Put; before, Put kept it as it was and
// returned it as the branch's tip, held, though no chain reaches it ("An error is
// expected but got nil"). PutTx, which looks only among the pending blocks while its
// first block is new, fails then with ErrConflict, as its doc says of a block stored
// where it did not look: run again, as Put does, it is refused.
func TestPutRefusesABlockThatDoesNotFollowAsStored(t *testing.T) {
	eachChain(t, 6, func(t *testing.T, m *Manager) {
		ctx := t.Context()
		block := func(id, prev string, num int64) Block {
			return Block{HeaderSignature: id, PreviousBlockID: prev, BlockNum: num}
		}
		tests := []struct {
			name     string
			received []Block // given to the Completer before the Put
			branch   []Block
			says     string
			putTx    error // what PutTx returns, in a transaction its caller commits
		}{
			// A stored block named otherwise, then a new block after it.
			{"number repeats", nil, []Block{block("g0004", "g0002", 3), block("y", "g0004", 4)},
				"g0004 is stored numbered 4 after g0003, not 3 after g0002 as in the branch", ErrBrokenChain},
			{"number skips", nil, []Block{block("g0001", "g0002", 3), block("z", "g0001", 4)},
				"g0001 is stored numbered 1 after g0000, not 3 after g0002", ErrBrokenChain},
			{"after stored blocks of the branch", nil, []Block{block("g0003", "g0002", 3), block("g0005", "g0003", 4), block("w", "g0005", 5)},
				"g0005 is stored numbered 5 after g0004, not 4 after g0003", ErrBrokenChain},

			// A block the Completer received, numbered so that it cannot follow.
			{"waiting for a new block", []Block{block("p", "a", 7)}, []Block{block("a", "g0002", 3), block("p", "a", 4)},
				"p is stored numbered 7 after a, not 4 after a", ErrBrokenChain},
			{"a stray the Completer discarded", []Block{block("s", "r", 9), block("r", "a3", 4)}, []Block{block("a3", "g0002", 3), block("r", "a3", 4), block("s", "r", 5)},
				"s is stored numbered 9 after r, not 5 after r", refset.ErrConflict},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				for _, b := range tt.received {
					_, err := m.Completer().Receive(ctx, b)
					require.NoError(t, err)
				}
				before := stateOf(t, m)
				_, err := m.Put(ctx, tt.branch, m.Blocks().Hold("t", 0), m.Controller().Accept())
				requireRefused(t, m, before, err, tt.says, ErrBrokenChain)
				err = putTxAsCaller(ctx, t, m, tt.branch, m.Blocks().Hold("t", 0))
				require.ErrorIs(t, err, tt.putTx)
				if tt.putTx == ErrBrokenChain {
					requireRefused(t, m, before, err, tt.says, ErrBrokenChain)
				}
				assert.Equal(t, before, stateOf(t, m))
				anc, err := m.CommonAncestor(ctx, "g0005", "g0003")
				require.NoError(t, err)
				assert.Equal(t, "g0003", anc.HeaderSignature)
			})
		}
	})
}

// A PageSize past what a walk's query can bind is taken as the largest, 1<<20:
// every walk works as with a large page. Before, BranchDiff on PostgreSQL failed with the
// driver's untyped error: "failed to encode args[1]: unable to encode
// 9223372036854775807 into binary format for int4 (OID 23): 9223372036854775807 is
// greater than maximum value for int4".
func TestHugePageSizes(t *testing.T) {
	for _, size := range []int{math.MaxInt, math.MaxInt32, 1 << 40} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			testdb.Each(t, []testdb.Backend{testdb.SQLite, testdb.Pgx}, func(t *testing.T, b testdb.Backend) {
				ctx := t.Context()
				m, err := Open(ctx, b.Open(t, testdb.Options{}), Config{PageSize: size})
				require.NoError(t, err)
				_, err = m.Put(ctx, chain("m", NullBlockID, 0, 30), m.Blocks().Hold("t", 0), m.Controller().Accept())
				require.NoError(t, err)
				_, err = m.Put(ctx, chain("f", "m0010", 11, 3), m.Controller().Accept())
				require.NoError(t, err)
				var walked []string
				for b, err := range m.Branch(ctx, "m0029") {
					require.NoError(t, err)
					walked = append(walked, b.HeaderSignature)
				}
				assert.Len(t, walked, 30)
				diff, err := m.BranchDiff(ctx, "f0013", "m0029")
				require.NoError(t, err)
				assert.Equal(t, []string{"f0013", "f0012", "f0011"}, ids(diff))
				common, err := m.CommonAncestor(ctx, "m0029", "f0013")
				require.NoError(t, err)
				assert.Equal(t, "m0010", common.HeaderSignature)
			})
		})
	}
}

// A nil command given to PutTx is refused with ErrInvalidCommand before the branch is
// written, so a caller that goes on and commits its transaction commits nothing of
// the Put, and Put refuses it alike. Before, PutTx wrote the branch and only then
// failed in the set's UpgradeTx: "refset: command 0 is nil: invalid command", and
// the caller's commit stored the branch (blocks 3 -> 5), held by nothing.
func TestPutRefusesANilCommand(t *testing.T) {
	eachChain(t, 3, func(t *testing.T, m *Manager) {
		ctx := t.Context()
		var nilPointer *nilCommand
		for name, cmd := range map[string]refset.Command[string]{
			"nil":                 nil,
			"nil CommandFunc":     refset.CommandFunc[string](nil),
			"nil pointer command": nilPointer,
		} {
			t.Run(name, func(t *testing.T) {
				before := stateOf(t, m)
				err := putTxAsCaller(ctx, t, m, chain("g", "g0002", 3, 2), m.Blocks().Hold("t", 0), cmd)
				requireRefused(t, m, before, err, "command 1 is nil", refset.ErrInvalidCommand)
				_, err = m.Put(ctx, chain("g", "g0002", 3, 2), cmd)
				requireRefused(t, m, before, err, "command 0 is nil", refset.ErrInvalidCommand)
			})
		}
	})
}

// nilCommand is a Command whose nil pointer is a nil command.
type nilCommand struct{}

func (*nilCommand) Execute(context.Context, refset.Tx, string) error { return nil }

// A peer may send a block that names a real block as its predecessor with a number
// that cannot follow it. It waits for that predecessor; when the predecessor
// arrives, by Receive or by Put, the predecessor is stored and completed all the
// same, and the stray, and what waits behind it, wait no more (Outcome.Discarded)
// and are collected. Before,
// the stray failed every arrival of its predecessor with ErrBrokenChain, for ever: a
// peer stalled the chain with one block.
func TestStrayWaiterDoesNotBlockItsPredecessor(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		ctx := t.Context()
		c := m.Completer()
		tests := []struct {
			name   string
			arrive func(t *testing.T, main []Block) []string // delivers main; returns what it discarded, where it says
		}{
			{"predecessor received", func(t *testing.T, main []Block) []string {
				var discarded []string
				for _, b := range main {
					out, err := c.Receive(ctx, b)
					require.NoError(t, err, "the stray does not fail its predecessor's arrival")
					discarded = append(discarded, out.Discarded...)
				}
				return discarded
			}},
			{"predecessor received after its own", func(t *testing.T, main []Block) []string {
				var discarded []string
				for _, i := range []int{2, 1, 0} {
					out, err := c.Receive(ctx, main[i])
					require.NoError(t, err, "the stray does not fail its predecessor's arrival")
					discarded = append(discarded, out.Discarded...)
				}
				return discarded
			}},
			{"predecessor put", func(t *testing.T, main []Block) []string {
				_, err := m.Put(ctx, main, m.Blocks().Hold("t", 0))
				require.NoError(t, err, "the stray does not fail the Put of its predecessor")
				return nil
			}},
		}
		for i, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				prefix := fmt.Sprintf("m%d-", i)
				main := chain(prefix, NullBlockID, 0, 3)
				stray := Block{HeaderSignature: prefix + "stray", PreviousBlockID: main[1].HeaderSignature, BlockNum: 40}
				// And a block that follows the stray: it can never be completed either.
				behind := Block{HeaderSignature: prefix + "behind", PreviousBlockID: stray.HeaderSignature, BlockNum: 41}
				for _, b := range []Block{stray, behind} {
					out, err := c.Receive(ctx, b)
					require.NoError(t, err)
					require.True(t, out.Pending)
				}
				discarded := tc.arrive(t, main)
				if discarded != nil {
					assert.Equal(t, []string{stray.HeaderSignature, behind.HeaderSignature}, discarded)
				}
				assert.Zero(t, count(t, m, `SELECT COUNT(*) FROM pending_blocks`), "nothing waits for ever")
				assert.Equal(t, 1, count(t, m, `SELECT COUNT(*) FROM blocks WHERE header_signature = ? AND previous_block_ref IS NOT NULL`,
					main[2].HeaderSignature), "the chain is complete")
				collect(t, m)
				for _, id := range []string{stray.HeaderSignature, behind.HeaderSignature} {
					found, err := m.Contains(ctx, id)
					require.NoError(t, err)
					assert.False(t, found, "%s is collected", id)
				}
				found, err := m.Contains(ctx, main[2].HeaderSignature)
				require.NoError(t, err)
				assert.True(t, found)
			})
		}
	})
}

// Receive checks a block's number against its stored predecessor even while that
// one waits, as its doc says (ErrBrokenChain, nothing changed); and a block that
// arrives and waits drops the blocks that wait for it but cannot follow it, and
// those behind them. So no two blocks wait for each other in a circle, where before
// both waited for ever and Pending asked peers for nothing.
func TestReceiveRefusesWhatCannotFollowAWaitingPredecessor(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		ctx := t.Context()
		c := m.Completer()
		out, err := c.Receive(ctx, Block{HeaderSignature: "w5", PreviousBlockID: "w4", BlockNum: 5})
		require.NoError(t, err)
		require.True(t, out.Pending)

		before := stateOf(t, m)
		_, err = c.Receive(ctx, Block{HeaderSignature: "w9", PreviousBlockID: "w5", BlockNum: 9})
		requireRefused(t, m, before, err, "w9 has number 9 after w5's 5", ErrBrokenChain)

		// a waits for b; b arrives saying it follows a. Each is numbered one more than
		// the other: a cannot follow b, so b, waiting for a, can never be completed
		// either, and neither waits any more. Peers are not asked for either.
		out, err = c.Receive(ctx, Block{HeaderSignature: "a", PreviousBlockID: "b", BlockNum: 5})
		require.NoError(t, err)
		require.True(t, out.Pending)
		out, err = c.Receive(ctx, Block{HeaderSignature: "b", PreviousBlockID: "a", BlockNum: 6})
		require.NoError(t, err)
		assert.False(t, out.Pending, "b closed a circle")
		assert.Equal(t, []string{"a", "b"}, out.Discarded)
		collect(t, m)
		waiting, missing, err := c.Pending(ctx)
		require.NoError(t, err)
		assert.Equal(t, 1, waiting, "w5")
		assert.Equal(t, []string{"w4"}, missing)
		for _, id := range []string{"a", "b"} {
			found, err := m.Contains(ctx, id)
			require.NoError(t, err)
			assert.False(t, found, "%s is collected", id)
		}
	})
}

// Commit makes a stored, complete block the head, and refuses anything else,
// changing nothing: the empty ID (ErrInvalidID), an unknown block (ErrUnknownBlock,
// as its doc says: before, the foreign key's bare ErrNotFound), and a block that
// waits in the Completer (ErrMissingPredecessor: before, it was committed, both the
// Completer's and the controller's, and once its chain arrived the committed head
// went into the fork cache). Before, Commit("") on a chain with no head did nothing
// and returned nil.
func TestCommitRefusesWhatCannotBeTheHead(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		ctx := t.Context()
		cc := m.Controller()
		tests := []struct {
			name string
			id   string
			says string
			want []error
		}{
			{"empty ID", "", "empty block ID", []error{refset.ErrInvalidID}},
			{"unknown block", "nowhere", "nowhere", []error{ErrUnknownBlock, refset.ErrNotFound}},
			{"waiting block", "g0005", "cannot commit g0005: it is not linked to its predecessor g0004", []error{ErrMissingPredecessor, refset.ErrNotFound}},
		}
		_, err := m.Completer().Receive(ctx, chain("g", "g0004", 5, 1)[0])
		require.NoError(t, err)
		for _, tc := range tests {
			t.Run("before any head/"+tc.name, func(t *testing.T) {
				before := stateOf(t, m)
				requireRefused(t, m, before, cc.Commit(ctx, tc.id), tc.says, tc.want...)
				assert.Empty(t, head(t, m))
			})
		}
		receiveAll(t, m.Completer(), chain("f", NullBlockID, 0, 2))
		require.Equal(t, "f0001", head(t, m))
		for _, tc := range tests {
			t.Run("with a head/"+tc.name, func(t *testing.T) {
				before := stateOf(t, m)
				requireRefused(t, m, before, cc.Commit(ctx, tc.id), tc.says, tc.want...)
				assert.Equal(t, "f0001", head(t, m))
				assert.Empty(t, forks(t, m))
			})
		}
		// g's chain arrives: fork choice commits g0005, and no committed block is a fork.
		receiveAll(t, m.Completer(), chain("g", NullBlockID, 0, 5))
		assert.Equal(t, "g0005", head(t, m))
		assert.Equal(t, []string{"f0001"}, forks(t, m))
	})
}

// The controller's Accept, given the committed head (a caller's own hand-over of a
// block Commit made the head), leaves it committed and out of the fork cache, which
// never holds a committed block.
func TestAcceptOfTheHeadMakesNoFork(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		ctx := t.Context()
		receiveAll(t, m.Completer(), chain("g", NullBlockID, 0, 3))
		require.NoError(t, m.Controller().Commit(ctx, "g0001"))
		require.NoError(t, refset.InTx(ctx, m.Database(), func(ctx context.Context, tx refset.Tx) error {
			return m.Controller().Accept().Execute(ctx, tx, "g0001")
		}))
		assert.Equal(t, "g0001", head(t, m))
		assert.Equal(t, []string{"g0002"}, forks(t, m), "g0002, abandoned, is the one fork")
	})
}

// Callers racing to store the same blocks, by Put and by Receive, all succeed: Put is
// idempotent, and Receive of a stored block is a Duplicate. Before, on Postgres,
// whichever wrote second failed with the database's ErrDuplicate.
func TestRacingCallersStoreTheSameBlocks(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		ctx := t.Context()
		const callers, n = 8, 40
		for round, name := range []string{"genesis branch", "branch on a stored block"} {
			t.Run(name, func(t *testing.T) {
				prefix := fmt.Sprintf("r%d-", round)
				prev, from := NullBlockID, int64(0)
				if round > 0 {
					prev, from = "r0-0039", 40
				}
				branch := chain(prefix, prev, from, n)
				start := make(chan struct{})
				errs := make([]error, callers)
				var wg sync.WaitGroup
				for i := range callers {
					wg.Go(func() {
						<-start
						if i%2 == 0 {
							_, errs[i] = m.Put(ctx, branch, m.Blocks().Hold(fmt.Sprintf("caller-%d", i), 0))
							return
						}
						for _, b := range branch[:5] {
							if _, err := m.Completer().Receive(ctx, b); err != nil {
								errs[i] = err
								return
							}
						}
					})
				}
				close(start)
				wg.Wait()
				for i, err := range errs {
					require.NoError(t, err, "caller %d", i)
				}
				assert.Equal(t, n, count(t, m, `SELECT COUNT(*) FROM blocks WHERE header_signature LIKE ?`, prefix+"%"))
				assert.Equal(t, callers/2, count(t, m, `SELECT COUNT(*) FROM blocks_holds WHERE object_id = ?`, branch[n-1].HeaderSignature),
					"every Put ran its commands")
				assert.Zero(t, count(t, m, `SELECT COUNT(*) FROM pending_blocks`))
			})
		}
	})
}

// A walk of a branch that clean-up deletes under it (nothing holds it) fails with
// ErrUnknownBlock, naming the block it could not read; before, it ended there without
// an error, as if the branch ended there.
func TestWalkUnderTheCollectorSaysSo(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		ctx := t.Context()
		_, err := m.Put(ctx, chain("u", NullBlockID, 0, 100)) // held by nothing
		require.NoError(t, err)
		var walked []*Block
		var walkErr error
		for b, err := range m.Branch(ctx, "u0099") {
			if err != nil {
				walkErr = err
				break
			}
			if walked = append(walked, b); len(walked) == 1 {
				collect(t, m)
			}
		}
		require.NotEmpty(t, walked)
		last := walked[len(walked)-1]
		require.NotNil(t, last.PreviousBlockRef, "the walk stopped at a block linked to its predecessor")
		found, err := m.Contains(ctx, *last.PreviousBlockRef)
		require.NoError(t, err)
		require.False(t, found, "the collector deleted the walk's next block")
		require.ErrorIs(t, walkErr, ErrUnknownBlock, "a walk cut short says so")
		require.ErrorIs(t, walkErr, refset.ErrNotFound)
		assert.Contains(t, walkErr.Error(), *last.PreviousBlockRef+", linked from a block this walk passed, was deleted during the walk")
	})
}

// A call whose context has ended, or ends before the call, fails with the context's
// error and changes nothing.
func TestEndedContextsChangeNothing(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		put(t, m, chain("g", NullBlockID, 0, 3))
		cancelled, cancel := context.WithCancel(t.Context())
		cancel()
		expired, cancel2 := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
		defer cancel2()
		for name, ctx := range map[string]context.Context{"cancelled": cancelled, "expired": expired} {
			want := ctx.Err()
			for call, fn := range map[string]func() error{
				"Put":     func() error { _, err := m.Put(ctx, chain("g", "g0002", 3, 2)); return err },
				"Receive": func() error { _, err := m.Completer().Receive(ctx, chain("g", "g0002", 3, 1)[0]); return err },
				"Commit":  func() error { return m.Controller().Commit(ctx, "g0001") },
				"Branch": func() error {
					for _, err := range m.Branch(ctx, "g0002") {
						if err != nil {
							return err
						}
					}
					return nil
				},
				"BranchDiff": func() error { _, err := m.BranchDiff(ctx, "g0002", "g0000"); return err },
				"Pending":    func() error { _, _, err := m.Completer().Pending(ctx); return err },
			} {
				t.Run(name+"/"+call, func(t *testing.T) {
					before := stateOf(t, m)
					err := fn()
					require.ErrorIs(t, err, want)
					assert.Equal(t, before, stateOf(t, m))
				})
			}
		}
	})
}

// A Put of a huge branch, many IDs a block, and a ContainsAnyBatches of hundreds of
// IDs, work on every database (no statement grows past a database's limit on
// parameters), and IDs of any UTF-8 text, JSON's quotes and separators included,
// read back as they went in.
func TestHugeAndUnicodeBranches(t *testing.T) {
	eachDB(t, Config{PageSize: 1000}, func(t *testing.T, m *Manager) {
		ctx := t.Context()
		const n = 20000
		branch := chain("huge", NullBlockID, 0, n)
		for i := range branch {
			for j := range 3 {
				branch[i].TransactionIDs = append(branch[i].TransactionIDs, fmt.Sprintf("t%d-%d", i, j))
			}
		}
		odd := []string{`é","ü`, `"`, `\`, `[]`, "日本語", "<&>", "tab\there", `","`}
		branch = append(branch, Block{HeaderSignature: `blöck","ñ`, PreviousBlockID: branch[n-1].HeaderSignature, BlockNum: n,
			BatchIDs: odd, TransactionIDs: IDs{"🙂"}})
		_, err := m.Put(ctx, branch, m.Blocks().Hold("t", 0))
		require.NoError(t, err)
		got, err := m.Get(ctx, []string{`blöck","ñ`})
		require.NoError(t, err)
		require.NotNil(t, got[0])
		assert.Equal(t, IDs(odd), got[0].BatchIDs)
		assert.Equal(t, IDs{"🙂"}, got[0].TransactionIDs)
		walked := 0
		for _, err := range m.Branch(ctx, `blöck","ñ`) {
			require.NoError(t, err)
			walked++
		}
		assert.Equal(t, n+1, walked)
		ids := make([]string, 500)
		for i := range ids {
			ids[i] = fmt.Sprintf("absent-%d", i)
		}
		found, err := m.ContainsAnyBatches(ctx, `blöck","ñ`, ids)
		require.NoError(t, err)
		assert.False(t, found)
		found, err = m.ContainsAnyBatches(ctx, `blöck","ñ`, append(ids, `é","ü`))
		require.NoError(t, err)
		assert.True(t, found)
		found, err = m.ContainsAnyTransactions(ctx, `blöck","ñ`, append(ids, "t7-2"))
		require.NoError(t, err)
		assert.True(t, found)
	})
}

// A block ID is a peer's data, and an error names it: quoted where it has characters
// that do not print (a newline would start a forged line of a log), cut where long.
func TestBlockIDsInMessages(t *testing.T) {
	eachChain(t, 2, func(t *testing.T, m *Manager) {
		forged := "x\nlevel=ERROR msg=forged"
		long := strings.Repeat("b", 2000)
		for _, tc := range []struct {
			name   string
			branch []Block
			says   string
		}{
			{"its own predecessor", []Block{{HeaderSignature: forged, PreviousBlockID: forged, BlockNum: 2}},
				`"x\nlevel=ERROR msg=forged" is its own previous block`},
			{"a genesis numbered", []Block{{HeaderSignature: long, PreviousBlockID: NullBlockID, BlockNum: 3}},
				"(2000 bytes) has number 3"},
			{"not following its stored predecessor", []Block{{HeaderSignature: forged, PreviousBlockID: "g0001", BlockNum: 5}},
				`"x\nlevel=ERROR msg=forged" has number 5 after g0001's 1`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				before := stateOf(t, m)
				_, err := m.Put(t.Context(), tc.branch)
				requireRefused(t, m, before, err, tc.says, ErrBrokenChain)
				assert.NotContains(t, err.Error(), "\n")
				assert.Less(t, len(err.Error()), 400)
			})
		}
	})
}
