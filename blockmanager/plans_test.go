package blockmanager

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/refsettest"
	"github.com/stretchr/testify/require"
)

// On a large, skewed block store (one long committed chain in one segment, most of
// its blocks held by one holder, abandoned forks waiting for clean-up, a few recent
// forks in the fork cache, a few blocks pending), every statement the manager runs
// on PostgreSQL, and everything they fire (clean-up's triggers, the foreign keys'
// checks), is planned without JIT and without a sequential scan of a big table:
// Put of a long chain, of a fork and of a branch overlapping what is stored; the
// walks (Branch, BranchDiff, CommonAncestor, ContainsAny*); the Completer; the
// controller's Accept and Commit, Forks (ListHolds of the fork holder), Head,
// Pending, Get; and the clean-up of an abandoned chain, its careful path
// (lockedBatch, reached by a reference that commits under a batch) included. It
// holds before the tables have statistics, once ANALYZE gave them some, and after
// they grew fivefold past them (autovacuum off on them, so the statistics stay
// stale). The same long-lived session runs all three phases, so plans cached in one
// (pgx's prepared statements, trigger functions) meet the next.
func TestPlansOnLargeData(t *testing.T) {
	// A schema and a session of its own; it waits on the server mostly.
	t.Parallel()
	const first = 50_000 // blocks of the first load; the second grows the store fivefold
	ctx := t.Context()
	// The test's own statements (loads, making entries due) go through the plain pool:
	// they are no path of the manager's.
	if testing.Short() {
		t.Skip("loads 300,000 blocks")
	}
	log, db, plain := refsettest.PlanGuard(t)
	m, err := Open(ctx, db, Config{ForkTTL: time.Hour, Grace: time.Hour})
	require.NoError(t, err)
	exec := pgtest.Exec(t, plain)
	big := []string{"blocks", "blocks_holds", "blocks_review", "block_batches", "block_transactions"}
	for _, table := range big {
		exec(`ALTER TABLE ` + table + ` SET (autovacuum_enabled = off)`)
	}

	// The committed chain is m-0, m-1, ..., all in segment 1, committed up to
	// height; load appends n blocks to it. Every block has a batch and a
	// transaction, and all but every tenth are held by "app" (as an indexer holds
	// what it has not processed yet); every thousandth has an abandoned fork of three blocks, due for
	// review in an hour; every ten thousandth a block pending for a block never
	// received.
	height := int64(-1)
	load := func(n int64) {
		t.Helper()
		from, to := height+1, height+n
		// Without triggers (the rows are consistent by construction): the foreign
		// keys' checks and clean-up's would take most of the test's time. The review
		// queue gets what the triggers would have left in it: the abandoned forks.
		conn, err := plain.Conn(ctx)
		require.NoError(t, err)
		defer conn.Close()
		exec := pgtest.Exec(t, conn)
		exec(`SET session_replication_role = replica`)
		defer exec(`RESET session_replication_role`)
		exec(`INSERT INTO blocks (header_signature, previous_block_id, previous_block_ref, block_num,
				batch_ids, transaction_ids, payload, segment)
			SELECT 'm-' || i, CASE WHEN i = 0 THEN $3 ELSE 'm-' || (i - 1) END,
				CASE WHEN i = 0 THEN NULL ELSE 'm-' || (i - 1) END, i,
				'["batch-m-' || i || '"]', '["txn-m-' || i || '"]', '\x00', 1
			FROM generate_series($1::bigint, $2::bigint) i`, from, to, NullBlockID)
		exec(`INSERT INTO block_batches (batch_id, block_id)
			SELECT 'batch-m-' || i, 'm-' || i FROM generate_series($1::bigint, $2::bigint) i`, from, to)
		exec(`INSERT INTO block_transactions (transaction_id, block_id)
			SELECT 'txn-m-' || i, 'm-' || i FROM generate_series($1::bigint, $2::bigint) i`, from, to)
		exec(`INSERT INTO blocks_holds (holder, object_id)
			SELECT 'app', 'm-' || i FROM generate_series($1::bigint, $2::bigint) i WHERE i % 10 <> 0`, from, to)
		exec(`INSERT INTO blocks (header_signature, previous_block_id, previous_block_ref, block_num,
				batch_ids, transaction_ids, segment)
			SELECT 'old-' || i || '-' || k, prev, prev, i + k, '[]', '[]', -i
			FROM generate_series($1::bigint, $2::bigint) i, generate_series(1, 3) k,
				LATERAL (SELECT CASE WHEN k = 1 THEN 'm-' || i ELSE 'old-' || i || '-' || (k - 1) END) p(prev)
			WHERE i % 1000 = 0 ORDER BY k`, from, to)
		exec(`INSERT INTO blocks (header_signature, previous_block_id, block_num, batch_ids, transaction_ids, segment)
			SELECT 'pend-' || i, 'never-' || i, i, '[]', '[]', -1 - i
			FROM generate_series($1::bigint, $2::bigint) i WHERE i % 10000 = 5`, from, to)
		exec(`INSERT INTO pending_blocks (block_id, pending_previous_block_id)
			SELECT 'pend-' || i, 'never-' || i FROM generate_series($1::bigint, $2::bigint) i WHERE i % 10000 = 5`, from, to)
		exec(`INSERT INTO blocks_review (object_id, review_after)
			SELECT 'old-' || i || '-' || k, now() + interval '1 hour'
			FROM generate_series($1::bigint, $2::bigint) i, generate_series(1, 3) k WHERE i % 1000 = 0`, from, to)
		height = to
		exec(`DELETE FROM chain_heads`)
		exec(`INSERT INTO chain_heads (chain_head) VALUES ($1)`, fmt.Sprintf("m-%d", height))
	}

	// main appends n blocks to the committed chain, as the workload's Puts do.
	main := func(n int) []Block {
		out := make([]Block, n)
		for i := range out {
			num := height + 1 + int64(i)
			id := fmt.Sprintf("m-%d", num)
			out[i] = Block{HeaderSignature: id, PreviousBlockID: fmt.Sprintf("m-%d", num-1), BlockNum: num,
				BatchIDs: IDs{"batch-" + id}, TransactionIDs: IDs{"txn-" + id}, Payload: []byte{0}}
		}
		height += int64(n)
		return out
	}
	round := 0
	var session int // the explained pool's one session
	require.NoError(t, db.Pool().QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&session))
	// workload runs each path more times than the plan cache's five custom plans.
	workload := func() {
		t.Helper()
		for range 6 {
			round++
			r := fmt.Sprintf("r%d-", round)
			// A long chain onto the committed head, a fork off it 100 blocks down
			// (into the fork cache, through Accept), and a branch that overlaps what is
			// stored, committed through Accept.
			long := main(300)
			_, err := m.Put(ctx, long, m.Blocks().Hold("app", 0))
			require.NoError(t, err)
			forkAt := long[len(long)-100]
			fork := chain(r+"fork-", forkAt.HeaderSignature, forkAt.BlockNum+1, 20)
			forkTip, err := m.Put(ctx, fork, m.Controller().Accept())
			require.NoError(t, err)
			overlap := append(slices.Clone(long[len(long)-10:]), main(10)...)
			_, err = m.Put(ctx, overlap, m.Controller().Accept())
			require.NoError(t, err)
			tip := overlap[len(overlap)-1].HeaderSignature

			// The walks.
			walked := 0
			for _, err := range m.Branch(ctx, tip) {
				require.NoError(t, err)
				if walked++; walked == 5000 {
					break
				}
			}
			diff, err := m.BranchDiff(ctx, forkTip.ID(), tip)
			require.NoError(t, err)
			require.Len(t, diff, 20)
			common, err := m.CommonAncestor(ctx, tip, forkTip.ID())
			require.NoError(t, err)
			require.Equal(t, forkAt.HeaderSignature, common.HeaderSignature)
			found, err := m.ContainsAnyBatches(ctx, tip, []string{fmt.Sprintf("batch-m-%d", height-2000), "batch-none"})
			require.NoError(t, err)
			require.True(t, found)
			found, err = m.ContainsAnyTransactions(ctx, tip, []string{"txn-none"})
			require.NoError(t, err)
			require.False(t, found)
			// A candidate block's batches, as a validator asks about them: a thousand.
			candidate := make([]string, 1000)
			for i := range candidate {
				candidate[i] = fmt.Sprintf("batch-new-%d", i)
			}
			found, err = m.ContainsAnyBatches(ctx, tip, candidate)
			require.NoError(t, err)
			require.False(t, found)

			// The completer: a block before its predecessor, then the predecessor.
			next := main(2)
			out, err := m.Completer().Receive(ctx, next[1])
			require.NoError(t, err)
			require.True(t, out.Pending)
			out, err = m.Completer().Receive(ctx, next[0])
			require.NoError(t, err)
			require.Equal(t, 2, out.Completed)
			_, _, err = m.Completer().Pending(ctx)
			require.NoError(t, err)

			// The controller: commit the fork, then the main chain again (the fork,
			// abandoned, goes back to the fork cache).
			cc := m.Controller()
			require.NoError(t, cc.Commit(ctx, forkTip.ID()))
			require.NoError(t, cc.Commit(ctx, next[1].HeaderSignature))
			head, err := cc.Head(ctx)
			require.NoError(t, err)
			require.Equal(t, next[1].HeaderSignature, head)
			forks, err := cc.Forks(ctx)
			require.NoError(t, err)
			require.Contains(t, forks, forkTip.ID())
			got, err := m.Get(ctx, []string{tip, "none"})
			require.NoError(t, err)
			require.NotNil(t, got[0])

			// Clean-up of the fork once abandoned: its hold expires, its blocks are
			// due, and one batch deletes the chain.
			exec(`UPDATE blocks_holds SET expires_at = now() - interval '1 second' WHERE object_id = $1`, forkTip.ID())
			exec(`UPDATE blocks_review SET review_after = now() - interval '1 second' WHERE object_id = ANY ($1)`,
				pq.Array(blockIDs(fork)))
			stats, err := m.Collector().Collect(ctx)
			require.NoError(t, err)
			require.EqualValues(t, 20, stats.Deleted, "%v", stats)

			// The careful clean-up (lockedBatch): an abandoned fork falls due, and a
			// hold on its tip commits while the batch that deletes the fork waits for
			// the hold's lock on it. The database refuses the batch's delete, and the
			// batch is reviewed again, locking the objects first; the tip stays.
			old := fmt.Sprintf("old-%d-", 1000*round)
			exec(`UPDATE blocks_review SET review_after = now() - interval '1 second' WHERE object_id = ANY ($1)`,
				pq.Array([]string{old + "1", old + "2", old + "3"}))
			late, err := plain.BeginTx(ctx, nil)
			require.NoError(t, err)
			_, err = late.ExecContext(ctx, `INSERT INTO blocks_holds (holder, object_id) VALUES ('late', $1)`, old+"3")
			require.NoError(t, err)
			collected := make(chan error, 1)
			go func() {
				_, err := m.Collector().Collect(ctx)
				collected <- err
			}()
			require.Eventually(t, func() bool {
				var waits bool
				err := plain.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted)`, session).Scan(&waits)
				return err == nil && waits
			}, 10*time.Second, time.Millisecond, "the batch never waited for the hold's lock")
			require.NoError(t, late.Commit())
			require.NoError(t, <-collected)
			stored, err := m.Contains(ctx, old+"3")
			require.NoError(t, err)
			require.True(t, stored)
		}
	}

	const beforeAnalyze = "before ANALYZE"
	check := func(phase string) {
		t.Helper()
		plans := log.PlansOf(t, workload)
		require.True(t, slices.ContainsFunc(plans, func(p refsettest.Plan) bool {
			return strings.Contains(p.Query, "LEFT JOIN locked")
		}), "%s: the careful clean-up (lockedBatch) never ran", phase)
		if phase == beforeAnalyze {
			// Without statistics the planner takes each ID of a long list to be in
			// hundreds of rows, and JIT-compiles the holders' look-up (a tenth of a
			// second for thousands of IDs). Its plan is still a look-up by key an ID,
			// where one comparing the table's every row with the list (= ANY) took
			// seconds (25 s for 5,000 IDs at 50,000 blocks).
			for i, p := range plans {
				if strings.Contains(p.Query, "LATERAL (SELECT block_id FROM block_batches") {
					plans[i].JIT = nil
				}
			}
		}
		refsettest.AssertPlans(t, phase, plans, big...)
	}

	load(first)
	check(beforeAnalyze)
	// All the manager's tables, as autovacuum would have (the small ones too).
	exec(`ANALYZE blocks, blocks_holds, blocks_review, block_batches, block_transactions, pending_blocks, chain_heads`)
	check("after ANALYZE")
	load(4 * first)
	check("grown fivefold past the statistics")
	require.Empty(t, log.Unparsed(), "auto_explain messages that did not parse")
}

func blockIDs(blocks []Block) []string {
	out := make([]string, len(blocks))
	for i, b := range blocks {
		out[i] = b.HeaderSignature
	}
	return out
}
