package conformance

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The clean-up of abandoned chains: deleting a block frees the one before it, and a
// collector follows that within its batch instead of paying a batch per block.

// chainOf stores n blocks chained by prev, the first on prev ("" for none), with IDs
// prefix-0000, prefix-0001, ..., and returns the IDs, oldest first. Nothing
// references the newest.
func (e *env) chainOf(tb testing.TB, prefix, prev string, n int) []string {
	tb.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%04d", prefix, i)
	}
	const per = 100
	err := refset.InTx(tb.Context(), e.db, func(tx refset.Tx) error {
		for start := 0; start < n; start += per {
			end := min(start+per, n)
			var args []any
			for i := start; i < end; i++ {
				var p any
				switch {
				case i > 0:
					p = ids[i-1]
				case prev != "":
					p = prev
				}
				args = append(args, ids[i], p, int64(i))
			}
			q := `INSERT INTO blocks (id, prev, height) VALUES ` + strings.TrimSuffix(strings.Repeat("(?, ?, ?), ", end-start), ", ")
			if _, err := tx.ExecContext(tb.Context(), e.sql(q), args...); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(tb, err)
	return ids
}

// abandon deletes the heads row of id, as a node dropping a fork does.
func (e *env) abandon(tb testing.TB, id string) {
	tb.Helper()
	e.mustExec(tb, `DELETE FROM heads WHERE block_id = ?`, id)
}

// reviewLater queues id for review an hour from now, as a new block in its grace
// period, or one a collector postponed, is.
func (e *env) reviewLater(tb testing.TB, id string) {
	tb.Helper()
	var later any = time.Now().Add(time.Hour)
	if e.h.Types.Time == "TIMESTAMP" { // SQLite keeps Unix milliseconds
		later = time.Now().Add(time.Hour).UnixMilli()
	}
	e.mustExec(tb, `DELETE FROM blocks_review WHERE object_id = ?`, id)
	e.mustExec(tb, `INSERT INTO blocks_review (object_id, review_after) VALUES (?, ?)`, id, later)
}

// reviewAll makes everything queued due and collects it, expecting nothing deleted:
// what a collector running all along would have done by the time a chain is
// abandoned.
func reviewAll(tb testing.TB, e *env, c *cleanup.Collector) {
	tb.Helper()
	e.makeDue(tb)
	s, err := c.Collect(tb.Context())
	require.NoError(tb, err)
	require.Zero(tb, s.Deleted, "everything is referenced: %v", s)
}

// An abandoned chain of 1,000 blocks goes in one Collect, in about one batch per
// BatchSize blocks rather than one per block, and leaves nothing queued.
func testChainInOneCollect(t *testing.T, h Harness) {
	const length, batch = 1000, 100
	e := newEnv(t, h)
	set := e.chain(t)
	c := e.collector(t, cleanup.Config{BatchSize: batch})
	ctx := t.Context()
	_, err := set.Add(ctx, mkBlock("kept", "", 0), e.acquireHead())
	require.NoError(t, err)
	ids := e.chainOf(t, "link", "", length)
	e.mustExec(t, `INSERT INTO heads (block_id) VALUES (?)`, ids[length-1])
	reviewAll(t, e, c)

	e.abandon(t, ids[length-1])
	s, err := c.Collect(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(length), s.Deleted, "%v", s)
	assert.Equal(t, []string{"kept"}, e.ids(t, "blocks", "id"))
	assert.LessOrEqual(t, s.Batches, 2*length/batch, "a batch per block, not per BatchSize blocks: %v", s)
	assert.Zero(t, e.count(t, "blocks_review", ""), "the queue is empty once all is reviewed")
	report, err := c.Check(ctx)
	require.NoError(t, err)
	assert.True(t, report.OK(), "%+v", report)
}

// The walk down an abandoned chain stops at the first block something else keeps:
// a hold, a root row, another block built on it, or its own review time still ahead
// (a new block's grace period). Everything above it goes in the same Collect, in a
// few batches; it and everything below it stay.
func testChainStopsAtKeptBlock(t *testing.T, h Harness) {
	const length, kept = 30, 10
	cases := []struct {
		name string
		keep func(t *testing.T, e *env, set *refset.RefSet[block, string], id string)
		also []string // blocks besides the chain's lower part that stay
	}{
		{"held", func(t *testing.T, e *env, _ *refset.RefSet[block, string], id string) {
			e.mustExec(t, `INSERT INTO blocks_holds (holder, object_id) VALUES ('keeper', ?)`, id)
		}, nil},
		{"referenced by a root table", func(t *testing.T, e *env, _ *refset.RefSet[block, string], id string) {
			e.mustExec(t, `INSERT INTO pending (block_id) VALUES (?)`, id)
		}, nil},
		{"a live fork builds on it", func(t *testing.T, e *env, set *refset.RefSet[block, string], id string) {
			_, err := set.Add(t.Context(), mkBlock("fork", id, 0), e.acquireHead())
			require.NoError(t, err)
		}, []string{"fork"}},
		{"its review is not due", func(t *testing.T, e *env, _ *refset.RefSet[block, string], id string) {
			e.reviewLater(t, id)
		}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, h)
			set := e.chain(t)
			c := e.collector(t, cleanup.Config{BatchSize: 100})
			ids := e.chainOf(t, "link", "", length)
			e.mustExec(t, `INSERT INTO heads (block_id) VALUES (?)`, ids[length-1])
			reviewAll(t, e, c)
			tc.keep(t, e, set, ids[kept])

			e.abandon(t, ids[length-1])
			s, err := c.Collect(t.Context())
			require.NoError(t, err)
			assert.Equal(t, int64(length-kept-1), s.Deleted, "%v", s)
			assert.Equal(t, sorted(append(append([]string(nil), ids[:kept+1]...), tc.also...)...), e.ids(t, "blocks", "id"))
			assert.LessOrEqual(t, s.Batches, 5, "the walk stopped short and went on a block per batch: %v", s)
			report, err := c.Check(t.Context())
			require.NoError(t, err)
			assert.True(t, report.OK(), "%+v", report)
		})
	}
}

// A table with two references to itself (a block's parent and its uncle): the walk
// follows both, and stops at a block the other one still keeps.
func testChainAlongTwoEdges(t *testing.T, h Harness) {
	e := newEnv(t, h)
	e.mustExec(t, `CREATE TABLE dag (id {Text} NOT NULL PRIMARY KEY, prev {Text} REFERENCES dag (id) ON DELETE RESTRICT,
		uncle {Text} REFERENCES dag (id), height {Int} NOT NULL, payload {Bytes})`)
	e.mustExec(t, `CREATE INDEX dag_prev ON dag (prev)`)
	e.mustExec(t, `CREATE INDEX dag_uncle ON dag (uncle)`)
	e.mustExec(t, `CREATE TABLE tips (dag_id {Text} NOT NULL PRIMARY KEY REFERENCES dag (id))`)
	openStore[block, string](t, e, "dag")
	c := e.collector(t, cleanup.Config{Table: "dag", BatchSize: 100})
	ctx := t.Context()
	// u0 <- u1 <- u2: a side chain, reached only as uncles. m0 <- m1 <- ... <- m9: the
	// main chain; m5's uncle is u2, m7's uncle is x1, and x1 is the parent of x2, a
	// live tip: x1 stays, and with it its own past x0.
	rows := [][3]any{
		{"u0", nil, nil}, {"u1", "u0", nil}, {"u2", "u1", nil},
		{"x0", nil, nil}, {"x1", "x0", nil}, {"x2", "x1", nil},
		{"m0", nil, nil},
	}
	for i := 1; i < 10; i++ {
		var uncle any
		switch i {
		case 5:
			uncle = "u2"
		case 7:
			uncle = "x1"
		}
		rows = append(rows, [3]any{fmt.Sprintf("m%d", i), fmt.Sprintf("m%d", i-1), uncle})
	}
	for _, r := range rows {
		e.mustExec(t, `INSERT INTO dag (id, prev, uncle, height) VALUES (?, ?, ?, 0)`, r[0], r[1], r[2])
	}
	e.mustExec(t, `INSERT INTO tips (dag_id) VALUES ('m9'), ('x2')`)
	e.mustExec(t, `UPDATE dag_review SET review_after = `+map[bool]string{true: "0", false: "now() - interval '1 second'"}[e.h.Types.Time == "TIMESTAMP"])
	s, err := c.Collect(ctx)
	require.NoError(t, err)
	require.Zero(t, s.Deleted, "%v", s)

	e.mustExec(t, `DELETE FROM tips WHERE dag_id = 'm9'`)
	s, err = c.Collect(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(13), s.Deleted, "m0-m9 and u0-u2: %v", s)
	assert.Equal(t, []string{"x0", "x1", "x2"}, e.ids(t, "dag", "id"))
	assert.LessOrEqual(t, s.Batches, 5, "%v", s)
}

// A writer references a block in the middle of an abandoned chain, in a transaction
// still open when a collector starts down the chain, and commits while the collector
// is at work (on Postgres its walk has usually reached the block by then, and waits
// for the writer's lock). The collector reports no error; the block and everything
// below it stay, everything above it goes.
func testChainReReferencedMidCollection(t *testing.T, h Harness) {
	const length, batch, rounds = 300, 100, 4
	e := newEnv(t, h)
	e.chain(t)
	c := e.collector(t, cleanup.Config{BatchSize: batch})
	ctx := t.Context()
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range rounds {
		ids := e.chainOf(t, fmt.Sprintf("r%d", round), "", length)
		e.mustExec(t, `INSERT INTO heads (block_id) VALUES (?)`, ids[length-1])
		reviewAll(t, e, c)
		e.abandon(t, ids[length-1])
		// Within the first batch's reach, so that the walk meets it at once.
		referenced := length - 2 - rng.IntN(batch-2)

		inserted, commit := make(chan struct{}), make(chan struct{})
		writerDone := make(chan error, 1)
		go func() {
			writerDone <- refset.InTx(ctx, e.db, func(tx refset.Tx) error {
				if _, err := tx.ExecContext(ctx, e.sql(`INSERT INTO pending (block_id) VALUES (?)`), ids[referenced]); err != nil {
					return err
				}
				close(inserted)
				<-commit
				return nil
			})
		}()
		<-inserted
		var s cleanup.Stats
		var collectErr error
		collected := make(chan struct{})
		go func() {
			defer close(collected)
			s, collectErr = c.Collect(ctx)
		}()
		time.Sleep(time.Duration(50+rng.IntN(150)) * time.Millisecond)
		close(commit)
		require.NoError(t, <-writerDone)
		<-collected
		require.NoError(t, collectErr, "round %d", round)
		assert.Equal(t, int64(length-referenced-1), s.Deleted, "round %d: %v", round, s)
		assert.Equal(t, ids[:referenced+1], e.ids(t, "blocks", "id"), "round %d", round)
		report, err := c.Check(ctx)
		require.NoError(t, err)
		assert.True(t, report.OK(), "%+v", report)

		e.mustExec(t, `DELETE FROM pending`)
		e.makeDue(t)
		_, err = c.Collect(ctx)
		require.NoError(t, err)
		require.Zero(t, e.count(t, "blocks", ""), "round %d", round)
	}
}
