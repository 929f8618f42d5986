package conformance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/internal/test/testlog"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/schema"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chain creates the RFC tables with indexed references (clean-up refuses
// unindexed ones) and a set on them.
func (e *env) chain(tb testing.TB) *refset.RefSet[block, string] {
	tb.Helper()
	set := e.blocks(tb)
	e.mustExec(tb, `CREATE INDEX blocks_prev ON blocks (prev)`)
	return set
}

// newChainSet is a fresh env with the RFC tables (chain), a set on them, and the
// test's context.
func newChainSet(t *testing.T, h harness) (*env, *refset.RefSet[block, string], context.Context) {
	t.Helper()
	e := newEnv(t, h)
	return e, e.chain(t), t.Context()
}

// newChainEnv is the start of most clean-up tests: newChainSet's, and a collector
// with cfg.
func newChainEnv(t *testing.T, h harness, cfg cleanup.Config) (*env, *refset.RefSet[block, string], *cleanup.Collector, context.Context) {
	t.Helper()
	e, set, ctx := newChainSet(t, h)
	return e, set, e.collector(t, cfg), ctx
}

func (e *env) collector(tb testing.TB, cfg cleanup.Config) *cleanup.Collector {
	tb.Helper()
	if cfg.Table == "" {
		cfg.Table = "blocks"
	}
	c, err := cleanup.Install(context.Background(), e.db, cfg)
	require.NoError(tb, err)
	return c
}

func (e *env) ids(tb testing.TB, table, column string) []string {
	tb.Helper()
	rows, err := e.db.Reader().QueryContext(context.Background(), fmt.Sprintf("SELECT %s FROM %s ORDER BY %s", column, table, column))
	return testdb.Column[string](tb, rows, err)
}

func sorted(ids ...string) []string {
	sort.Strings(ids)
	return ids
}

// makeDue ends the grace period of the queued objects (all, or those named), so a
// test need not wait for it.
func (e *env) makeDue(tb testing.TB, ids ...string) {
	tb.Helper()
	past := e.past()
	if len(ids) == 0 {
		e.mustExec(tb, "UPDATE blocks_review SET review_after = "+past)
	}
	for _, id := range ids {
		e.mustExec(tb, "UPDATE blocks_review SET review_after = "+past+" WHERE object_id = ?", id)
	}
}

// past is an SQL expression of a time in the past, as the review queue keeps time.
func (e *env) past() string {
	if e.h.Types.Time == "TIMESTAMP" { // SQLite keeps Unix milliseconds
		return "0"
	}
	return "now() - interval '1 second'"
}

// A chain with forks:
//
//	g <- a1 <- a2 <- a3   (head)
//	 \     \
//	  \     c1            (head)
//	   b1 <- b2           (head)
//	p                     (pending)
//
// Dropping b2's head row with plain SQL frees b2 and b1, down to g, in one call.
func testAbandonedFork(t *testing.T, h harness) {
	e, set, c, ctx := newChainEnv(t, h, cleanup.Config{BatchSize: 2}) // small batches: the walk spans several
	add := func(id, prev string, cmds ...refset.Command[string]) {
		_, err := set.Add(ctx, mkBlock(id, prev, 0), cmds...)
		require.NoError(t, err)
	}
	add("g", "")
	add("a1", "g")
	add("a2", "a1")
	add("a3", "a2", e.acquireHead())
	add("c1", "a1", e.acquireHead())
	add("b1", "g")
	add("b2", "b1", e.acquireHead())
	add("p", "", e.insertPending())
	e.makeDue(t)
	s, err := c.Collect(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(0), s.Deleted, "everything is referenced")
	assert.Equal(t, int64(8), s.Reviewed)

	e.mustExec(t, `DELETE FROM heads WHERE block_id = ?`, "b2")
	s, err = c.Collect(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(2), s.Deleted, "b2 and b1")
	assert.Equal(t, sorted("g", "a1", "a2", "a3", "c1", "p"), e.ids(t, "blocks", "id"))

	e.mustExec(t, `DELETE FROM heads WHERE block_id = ?`, "a3")
	s, err = c.Collect(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(2), s.Deleted, "a3 and a2; a1 is c1's parent")
	assert.Equal(t, sorted("g", "a1", "c1", "p"), e.ids(t, "blocks", "id"))

	report, err := c.Check(ctx)
	require.NoError(t, err)
	assert.True(t, report.OK(), "%+v", report)
	assert.Equal(t, 0, e.count(t, "blocks_review", ""), "the queue is empty once all is reviewed")
}

func testGrace(t *testing.T, h harness) {
	e, set, ctx := newChainSet(t, h)

	t.Run("a fresh object survives its grace period", func(t *testing.T) {
		c := e.collector(t, cleanup.Config{Grace: time.Hour})
		_, err := set.Add(ctx, mkBlock("fresh", "", 0))
		require.NoError(t, err)
		s, err := c.Collect(ctx)
		require.NoError(t, err)
		assert.Equal(t, int64(0), s.Reviewed, "not due yet")
		assert.Equal(t, 1, e.count(t, "blocks", "id = ?", "fresh"))
		why, err := c.Why(ctx, "fresh")
		require.NoError(t, err)
		assert.Empty(t, why, "nothing holds it: it is garbage once due")
		report, err := c.Check(ctx)
		require.NoError(t, err)
		assert.True(t, report.OK(), "a queued object is not leaked: %+v", report)
	})
	t.Run("after it, it goes", func(t *testing.T) {
		c := e.collector(t, cleanup.Config{Grace: 50 * time.Millisecond})
		_, err := set.Add(ctx, mkBlock("brief", "", 0))
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			_, err := c.Collect(ctx)
			require.NoError(t, err)
			return e.count(t, "blocks", "id = ?", "brief") == 0
		}, 10*time.Second, 20*time.Millisecond)
		assert.Equal(t, 1, e.count(t, "blocks", "id = ?", "fresh"), "the other install's grace still holds for fresh")
	})
}

func testExpiringHolds(t *testing.T, h harness) {
	e, set, c, ctx := newChainEnv(t, h, cleanup.Config{})
	_, err := set.Add(ctx, mkBlock("leased", "", 0), set.Hold("lock", 50*time.Millisecond))
	require.NoError(t, err)
	_, err = set.Add(ctx, mkBlock("kept", "", 0), set.Hold("owner", 0))
	require.NoError(t, err)
	e.makeDue(t)

	var expired int64
	require.Eventually(t, func() bool {
		s, err := c.Collect(ctx)
		require.NoError(t, err)
		expired += s.HoldsExpired
		return e.count(t, "blocks", "id = ?", "leased") == 0
	}, 10*time.Second, 20*time.Millisecond)
	assert.Equal(t, int64(1), expired)
	assert.Equal(t, 1, e.count(t, "blocks", "id = ?", "kept"), "a hold without expiry never lapses")
	assert.Equal(t, 1, e.count(t, "blocks_holds", "holder = ?", "owner"))
}

// testExpiryClockStartsAtWrite: a hold's time-to-live, and a new object's grace
// period, start when the row is written, not when its unit of work began: a unit
// that spent a while before its Add does not see that time come off the hold it
// takes, nor off the grace that protects what it wrote.
func testExpiryClockStartsAtWrite(t *testing.T, h harness) {
	const (
		before = 1500 * time.Millisecond // the unit's work before the Add
		ttl    = time.Hour
		slack  = 2 * time.Millisecond // SQLite's clock in whole milliseconds
	)
	e, set, _, ctx := newChainEnv(t, h, cleanup.Config{Grace: ttl})
	var written time.Time
	require.NoError(t, refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error {
		// A statement first, so that the transaction has begun on every database.
		if _, err := tx.ExecContext(ctx, e.sql(`SELECT 1`)); err != nil {
			return err
		}
		time.Sleep(before)
		written = time.Now()
		_, err := set.Add(ctx, mkBlock("late", "", 0), set.Hold("lease", ttl))
		return err
	}))
	for _, c := range []struct{ what, query string }{
		{"the hold's expiry", `SELECT expires_at FROM blocks_holds WHERE object_id = ? AND holder = ?`},
		{"the review's due time", `SELECT review_after FROM blocks_review WHERE object_id = ? AND ? <> ''`},
	} {
		drv, err := refsetdriver.Of(e.db)
		require.NoError(t, err)
		dest, read := drv.Clock().Scan()
		require.NoError(t, e.db.Reader().QueryRowContext(ctx, e.sql(c.query), "late", "lease").Scan(dest), c.query)
		at := read()
		assert.False(t, at.Before(written.Add(ttl-slack)), "%s is %v after the Add, %v short of %v: the clock started before the row was written",
			c.what, at.Sub(written).Round(time.Millisecond), written.Add(ttl).Sub(at).Round(time.Millisecond), ttl)
	}
}

func testReReferenced(t *testing.T, h harness) {
	e, set, c, ctx := newChainEnv(t, h, cleanup.Config{})
	tok, err := set.Add(ctx, mkBlock("x", "", 0), set.Hold("first", 0))
	require.NoError(t, err)
	e.makeDue(t)
	// The hold moves: the unhold queues x, the new hold references it again.
	_, err = handOverOf(t, tok, set.Unhold("first"), set.Hold("second", 0)).Complete(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, e.count(t, "blocks_review", "object_id = ?", "x"), "queued by the unhold")

	s, err := c.Collect(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(0), s.Deleted)
	assert.Equal(t, 1, e.count(t, "blocks", "id = ?", "x"))
	assert.Equal(t, 0, e.count(t, "blocks_review", ""), "reviewed and dequeued")
}

// A hand-over moves a reference from one holder to another in one transaction: a
// collector running all the while never sees the object unreferenced.
func testHandOverVersusCollector(t *testing.T, h harness) {
	e, set, c, ctx := newChainEnv(t, h, cleanup.Config{BatchSize: 10})
	const objects, moves = 20, 30
	toks := make([]*refset.RefToken[string], objects)
	for i := range toks {
		var err error
		toks[i], err = set.Add(ctx, mkBlock(fmt.Sprintf("h%02d", i), "", 0), set.Hold("holder-0", 0))
		require.NoError(t, err)
	}
	e.makeDue(t)
	stop := make(chan struct{})
	var collErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := c.Collect(ctx); err != nil {
				collErr = err
				return
			}
		}
	}()
	for m := range moves {
		for i, tok := range toks {
			var err error
			toks[i], err = handOverOf(t, tok, set.Unhold(fmt.Sprintf("holder-%d", m)), set.Hold(fmt.Sprintf("holder-%d", m+1), 0)).Complete(ctx)
			require.NoError(t, err)
		}
	}
	close(stop)
	wg.Wait()
	require.NoError(t, collErr)
	assert.Equal(t, objects, e.count(t, "blocks", ""), "no object was collected during its hand-overs")
	assert.Equal(t, objects, e.count(t, "blocks_holds", "holder = ?", fmt.Sprintf("holder-%d", moves)))
}

func testInstallAgain(t *testing.T, h harness) {
	e, set, ctx := newChainSet(t, h)
	first := e.collector(t, cleanup.Config{})
	second := e.collector(t, cleanup.Config{})
	names := func(c *cleanup.Collector) []string {
		var out []string
		for _, r := range c.References() {
			out = append(out, r.Table.Name+"."+r.Column)
		}
		sort.Strings(out)
		return out
	}
	assert.Equal(t, names(first), names(second))
	assert.Equal(t, []string{"blocks.prev", "blocks_holds.object_id", "heads.block_id", "pending.block_id"}, names(first))

	// A table whose rows are parts of the object (ON DELETE CASCADE) holds nothing.
	e.mustExec(t, `CREATE TABLE parts (block_id {Text} NOT NULL REFERENCES blocks (id) ON DELETE CASCADE, n {Int} NOT NULL, PRIMARY KEY (block_id, n))`)
	assert.NotContains(t, names(e.collector(t, cleanup.Config{})), "parts.block_id")

	// A table added later is picked up by installing again.
	e.mustExec(t, `CREATE TABLE votes (voter {Text} NOT NULL, block_id {Text} NOT NULL REFERENCES blocks (id), PRIMARY KEY (block_id, voter))`)
	third := e.collector(t, cleanup.Config{})
	assert.Contains(t, names(third), "votes.block_id")

	_, err := set.Add(ctx, mkBlock("v", "", 0))
	require.NoError(t, err)
	e.mustExec(t, `INSERT INTO votes (voter, block_id) VALUES ('alice', 'v')`)
	e.mustExec(t, `INSERT INTO parts (block_id, n) VALUES ('v', 1)`)
	e.makeDue(t)
	_, err = third.Collect(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, e.count(t, "blocks", "id = ?", "v"), "the vote keeps it")
	e.mustExec(t, `DELETE FROM votes`)
	s, err := third.Collect(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(1), s.Deleted, "the vote's removal queued it")
	assert.Equal(t, 0, e.count(t, "blocks", "id = ?", "v"))
	assert.Equal(t, 0, e.count(t, "parts", ""), "its parts went with it")

	// Installing twice did not double the triggers: one removal, one queue signal.
	_, err = set.Add(ctx, mkBlock("w", "", 0), e.acquireHead())
	require.NoError(t, err)
	e.makeDue(t)
	_, err = third.Collect(ctx)
	require.NoError(t, err)
	e.mustExec(t, `DELETE FROM heads WHERE block_id = 'w'`)
	var version int
	require.NoError(t, e.db.Reader().QueryRowContext(ctx, e.sql(`SELECT version FROM blocks_review WHERE object_id = ?`), "w").Scan(&version))
	assert.Equal(t, 1, version)
}

func testSweep(t *testing.T, h harness) {
	e, set, ctx := newChainSet(t, h)
	// Objects from before clean-up was installed, or whose queue was lost.
	for _, b := range []block{mkBlock("g", "", 0), mkBlock("live", "g", 1), mkBlock("dead1", "g", 1), mkBlock("dead2", "dead1", 2)} {
		_, err := set.Add(ctx, b)
		require.NoError(t, err)
	}
	e.mustExec(t, `INSERT INTO heads (block_id) VALUES ('live')`)
	c := e.collector(t, cleanup.Config{Grace: time.Hour})
	e.mustExec(t, `DELETE FROM blocks_review`) // the queue is lost

	report, err := c.Check(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(2), report.Leaked, "dead1 and dead2: %+v", report)
	s, err := c.Collect(ctx)
	require.NoError(t, err)
	assert.Zero(t, s.Deleted, "without a queue, Collect knows nothing")

	_, err = set.Add(ctx, mkBlock("new", "", 0)) // queued, in its grace period
	require.NoError(t, err)
	queued, s, err := c.Sweep(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(3), queued, "dead1, dead2 and new")
	assert.Equal(t, int64(2), s.Deleted)
	assert.Equal(t, sorted("g", "live", "new"), e.ids(t, "blocks", "id"), "new keeps its grace period")
	report, err = c.Check(ctx)
	require.NoError(t, err)
	assert.True(t, report.OK(), "%+v", report)
}

func testCheckAndWhy(t *testing.T, h harness) {
	e, set, c, ctx := newChainEnv(t, h, cleanup.Config{})
	_, err := set.Add(ctx, mkBlock("g", "", 0), set.Hold("auditor", 0))
	require.NoError(t, err)
	_, err = set.Add(ctx, mkBlock("a", "g", 1), e.acquireHead())
	require.NoError(t, err)

	why, err := c.Why(ctx, "g")
	require.NoError(t, err)
	var got []string
	for _, w := range why {
		table := w.Table[strings.LastIndex(w.Table, ".")+1:] // Postgres qualifies it with its schema
		got = append(got, table+"."+w.Column+" "+w.Key)
	}
	sort.Strings(got)
	require.Len(t, got, 2)
	assert.True(t, strings.HasPrefix(got[0], "blocks.prev id="), got[0])
	assert.Contains(t, got[0], "a")
	assert.True(t, strings.HasPrefix(got[1], "blocks_holds.object_id "), got[1])
	assert.Contains(t, got[1], "auditor")

	_, err = c.Why(ctx, "missing")
	require.ErrorIs(t, err, refset.ErrNotFound)

	report, err := c.Check(ctx)
	require.NoError(t, err)
	assert.True(t, report.OK(), "%+v", report)
}

func testUnindexed(t *testing.T, h harness) {
	e := newEnv(t, h)
	e.blocks(t) // prev has no index
	_, err := cleanup.Install(t.Context(), e.db, cleanup.Config{Table: "blocks"})
	require.ErrorIs(t, err, cleanup.ErrUnindexed)
	assert.Contains(t, err.Error(), `"prev"`, "the error names the index to create")

	_, err = cleanup.Install(t.Context(), e.db, cleanup.Config{Table: "nosuch"})
	require.ErrorIs(t, err, refset.ErrNotFound)
}

func testBackground(t *testing.T, h harness) {
	e := newEnv(t, h)
	set := e.chain(t)
	c := e.collector(t, cleanup.Config{Grace: time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	passes := make(chan cleanup.Stats, 1000)
	stopped := make(chan error)
	var cancelled atomic.Bool
	go func() {
		stopped <- c.Run(ctx, 5*time.Millisecond, func(s cleanup.Stats, err error) {
			// The one pass that may fail is one the cancel cut short after some of
			// its batches committed: it is reported with the context's error.
			if cancelled.Load() && errors.Is(err, context.Canceled) {
				return
			}
			assert.NoError(t, err)
			select {
			case passes <- s:
			default:
			}
		})
	}()
	_, err := set.Add(t.Context(), mkBlock("kept", "", 0), e.acquireHead())
	require.NoError(t, err)
	_, err = set.Add(t.Context(), mkBlock("dropped", "", 0))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return e.count(t, "blocks", "") == 1 }, 10*time.Second, 5*time.Millisecond,
		"the background collector removes the unreferenced block")
	assert.Equal(t, 1, e.count(t, "blocks", "id = ?", "kept"))
	require.Eventually(t, func() bool { return len(passes) > 0 }, 10*time.Second, 5*time.Millisecond,
		"every finished pass is reported")

	cancelled.Store(true)
	cancel()
	select {
	case err := <-stopped:
		require.NoError(t, err, "a cancelled Run returns nil")
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
	err = c.Run(t.Context(), 0, nil)
	require.Error(t, err, "a zero interval is refused")
	_, err = cleanup.Install(t.Context(), e.db, cleanup.Config{Table: "blocks", BatchSize: -1})
	require.Error(t, err, "a negative batch size is refused")
}

// The statements an ErrUnindexed names run as they stand, and make Install succeed.
func testSuggestedIndexes(t *testing.T, h harness) {
	e := newEnv(t, h)
	e.blocks(t) // prev has no index
	e.mustExec(t, `CREATE TABLE votes (voter {Text} NOT NULL, block_id {Text} NOT NULL REFERENCES blocks (id), PRIMARY KEY (voter, block_id))`)
	_, err := cleanup.Install(t.Context(), e.db, cleanup.Config{Table: "blocks"})
	var unindexed *cleanup.UnindexedError
	require.ErrorAs(t, err, &unindexed)
	require.ErrorIs(t, err, cleanup.ErrUnindexed)
	require.Len(t, unindexed.Indexes, 2, "blocks.prev and votes.block_id: %v", unindexed.Indexes)
	for _, stmt := range unindexed.Indexes {
		err := refset.InTx(t.Context(), e.db, func(ctx context.Context, tx refset.Tx) error {
			_, err := tx.ExecContext(t.Context(), stmt) // verbatim: no rewriting
			return err
		})
		require.NoError(t, err, stmt)
	}
	e.collector(t, cleanup.Config{})
}

// Collect, Sweep, Check and Why on an ended context return its error, and change
// nothing.
func testEndedContext(t *testing.T, h harness) {
	e, set, c, ctx := newChainEnv(t, h, cleanup.Config{})
	_, err := set.Add(ctx, mkBlock("due", "", 0))
	require.NoError(t, err)
	e.makeDue(t)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	expired, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel()
	calls := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"Collect", func(ctx context.Context) error { _, err := c.Collect(ctx); return err }},
		{"Sweep", func(ctx context.Context) error { _, _, err := c.Sweep(ctx); return err }},
		{"Check", func(ctx context.Context) error { _, err := c.Check(ctx); return err }},
		{"Why", func(ctx context.Context) error { _, err := c.Why(ctx, "due"); return err }},
	}
	for _, call := range calls {
		t.Run(call.name, func(t *testing.T) {
			require.ErrorIs(t, call.call(cancelled), context.Canceled)
			require.ErrorIs(t, call.call(expired), context.DeadlineExceeded)
			assert.Equal(t, 1, e.count(t, "blocks", "id = ?", "due"), "nothing was collected")
			assert.Equal(t, 1, e.count(t, "blocks_review", "object_id = ?", "due"), "nothing was dequeued")
		})
	}
}

// runBriefly runs c.Run and returns its error, failing the test if Run goes on past a
// generous deadline: the cases here must end Run by themselves. With an interval of an
// hour, Run must end after its first pass.
func runBriefly(t *testing.T, c *cleanup.Collector, interval time.Duration, onPass func(cleanup.Stats, error)) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	err := c.Run(ctx, interval, onPass)
	require.NoError(t, ctx.Err(), "Run went on until its context ended")
	return err
}

// withAndWithoutCallback are Run's two ways of being told about a failed pass.
var withAndWithoutCallback = []struct {
	name     string
	callback bool
}{{"with callback", true}, {"without callback", false}}

// Run on a database that was closed returns refset.ErrClosed after its first pass,
// instead of failing pass after pass until its context ends.
func testRunClosed(t *testing.T, h harness) {
	e := newEnv(t, h)
	e.chain(t)
	for _, tc := range withAndWithoutCallback {
		t.Run(tc.name, func(t *testing.T) {
			db := h.reopen(t, e.db)
			c, err := cleanup.Install(t.Context(), db, cleanup.Config{Table: "blocks"})
			require.NoError(t, err)
			closer, ok := db.(interface{ Close() error })
			require.True(t, ok, "the store's database has a Close method")
			require.NoError(t, closer.Close())

			var reported []error
			var onPass func(cleanup.Stats, error)
			if tc.callback {
				onPass = func(_ cleanup.Stats, err error) { reported = append(reported, err) }
			}
			err = runBriefly(t, c, time.Hour, onPass)
			require.ErrorIs(t, err, refset.ErrClosed)
			if tc.callback {
				require.Len(t, reported, 1, "the failed pass is reported, then Run stops")
				require.ErrorIs(t, reported[0], refset.ErrClosed)
			}
		})
	}
}

// Run whose set's tables were dropped returns refset.ErrSchema after its first pass,
// and Collect returns it too.
func testRunSchemaGone(t *testing.T, h harness) {
	h.sendsCancels(t)
	drops := []struct {
		name  string
		drops []string
	}{
		{"review queue", []string{`DROP TABLE blocks_review`}},
		{"every table of the set", []string{`DROP TABLE heads`, `DROP TABLE pending`, `DROP TABLE blocks_holds`,
			`DROP TABLE blocks`, `DROP TABLE blocks_review`}},
	}
	for _, d := range drops {
		for _, tc := range withAndWithoutCallback {
			t.Run(d.name+" "+tc.name, func(t *testing.T) {
				e := newEnv(t, h)
				e.chain(t)
				c := e.collector(t, cleanup.Config{})
				for _, stmt := range d.drops {
					e.mustExec(t, stmt)
				}
				_, err := c.Collect(t.Context())
				require.ErrorIs(t, err, refset.ErrSchema)

				passes := 0
				var onPass func(cleanup.Stats, error)
				if tc.callback {
					onPass = func(_ cleanup.Stats, err error) {
						passes++
						assert.ErrorIs(t, err, refset.ErrSchema)
					}
				}
				require.ErrorIs(t, runBriefly(t, c, time.Hour, onPass), refset.ErrSchema)
				if tc.callback {
					assert.Equal(t, 1, passes)
				}
			})
		}
	}
}

// refuseDeletes makes every delete of a block fail with an error that is neither a
// closed database nor a schema change: a trigger of the user's that raises.
func (e *env) refuseDeletes(tb testing.TB) {
	tb.Helper()
	if e.db.Driver().Name() == "postgres" { // the test's own trigger, in each dialect's words
		e.mustExec(tb, `CREATE FUNCTION refuse_delete() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN RAISE EXCEPTION 'deletes of blocks are refused'; END $$`)
		e.mustExec(tb, `CREATE TRIGGER refuse_delete BEFORE DELETE ON blocks FOR EACH ROW EXECUTE FUNCTION refuse_delete()`)
		return
	}
	e.mustExec(tb, `CREATE TRIGGER refuse_delete BEFORE DELETE ON blocks BEGIN SELECT RAISE(ABORT, 'deletes of blocks are refused'); END`)
}

// A pass that fails for a reason Run cannot judge permanent is never lost: with a
// callback, the callback sees each and Run goes on; without one, Run returns the
// error once MaxFailedPasses passes in a row failed.
func testRunFailures(t *testing.T, h harness) {
	h.sendsCancels(t)
	for _, tc := range withAndWithoutCallback {
		t.Run(tc.name, func(t *testing.T) {
			e, set, c, ctx := newChainEnv(t, h, cleanup.Config{})
			_, err := set.Add(ctx, mkBlock("doomed", "", 0))
			require.NoError(t, err)
			e.makeDue(t)
			e.refuseDeletes(t)

			if !tc.callback {
				err := runBriefly(t, c, 5*time.Millisecond, nil)
				require.Error(t, err)
				assert.Contains(t, err.Error(), "deletes of blocks are refused")
				assert.Contains(t, err.Error(), fmt.Sprint(cleanup.MaxFailedPasses))
				return
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var failures int
			err = c.Run(ctx, 5*time.Millisecond, func(_ cleanup.Stats, err error) {
				if assert.Error(t, err) {
					assert.Contains(t, err.Error(), "deletes of blocks are refused")
				}
				if failures++; failures == 2*cleanup.MaxFailedPasses {
					cancel()
				}
			})
			require.NoError(t, err, "a Run whose context ends returns nil")
			assert.Equal(t, 2*cleanup.MaxFailedPasses, failures, "with a callback, Run goes on through failures")
		})
	}
}

// Run's callback is called with no transaction open: a write from it does not wait
// for one, and a panic in it leaves the database free for the next pass.
func testRunCallbackPanic(t *testing.T, h harness) {
	e, set, c, ctx := newChainEnv(t, h, cleanup.Config{})
	_, err := set.Add(ctx, mkBlock("held", "", 0), e.acquireHead())
	require.NoError(t, err)
	_, err = set.Add(ctx, mkBlock("loose", "", 0))
	require.NoError(t, err)
	e.makeDue(t)

	// A transaction left open would hold the writer (SQLite) or the row locks of the
	// entries it claimed (Postgres): a write to them would wait out its deadline.
	probe := func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		return e.exec(ctx, `UPDATE blocks_review SET version = version + 1`)
	}
	var probed error
	recovered := func() (r any) {
		defer func() { r = recover() }()
		_ = c.Run(ctx, time.Hour, func(cleanup.Stats, error) {
			probed = probe()
			panic("callback failed")
		})
		return nil
	}()
	assert.Equal(t, "callback failed", recovered, "the panic goes on up through Run")
	require.NoError(t, probed, "the callback ran inside a transaction")
	require.NoError(t, probe(), "a transaction was left open")
	_, err = c.Collect(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"held"}, e.ids(t, "blocks", "id"))
}

// foreignKeys are references to blocks by other columns than its ID alone. Each
// creates a table named keyTable whose one row, made by pin, references the block
// with that ID and height.
var foreignKeys = []struct {
	name   string
	create []string
	pin    string
}{
	{
		name:   "to the ID column",
		create: []string{`CREATE TABLE keyed (block_id {Text} NOT NULL REFERENCES blocks (id))`},
		pin:    `INSERT INTO keyed (block_id) SELECT id FROM blocks WHERE id = ? AND height = ?`,
	},
	{
		name: "to a unique column",
		create: []string{`CREATE UNIQUE INDEX blocks_height_key ON blocks (height)`,
			`CREATE TABLE keyed (height {Int} NOT NULL REFERENCES blocks (height))`},
		pin: `INSERT INTO keyed (height) SELECT height FROM blocks WHERE id = ? AND height = ?`,
	},
	{
		name: "composite",
		create: []string{`CREATE UNIQUE INDEX blocks_id_height_key ON blocks (id, height)`,
			`CREATE TABLE keyed (block_id {Text} NOT NULL, height {Int} NOT NULL, FOREIGN KEY (block_id, height) REFERENCES blocks (id, height))`},
		pin: `INSERT INTO keyed (block_id, height) SELECT id, height FROM blocks WHERE id = ? AND height = ?`,
	},
}

// A key that would refuse an object's deletion and does not reference the ID column
// alone is refused by Install, by name; one ON DELETE CASCADE is left alone.
func testUnfollowedKeys(t *testing.T, h harness) {
	for _, fk := range foreignKeys[1:] {
		t.Run(fk.name, func(t *testing.T) {
			e := newEnv(t, h)
			e.chain(t)
			for _, stmt := range fk.create {
				e.mustExec(t, stmt)
			}
			_, err := cleanup.Install(t.Context(), e.db, cleanup.Config{Table: "blocks"})
			require.ErrorIs(t, err, refset.ErrSchema)
			assert.Contains(t, err.Error(), "keyed (", "the error names the key's table and columns")
			assert.Contains(t, err.Error(), `to the ID column "id"`, "the error says what is followed")
			assert.Zero(t, e.count(t, "blocks_review", ""), "a refused Install changes nothing")
		})
	}
	t.Run("on delete cascade", func(t *testing.T) {
		e := newEnv(t, h)
		e.chain(t)
		e.mustExec(t, `CREATE UNIQUE INDEX blocks_height_key ON blocks (height)`)
		e.mustExec(t, `CREATE TABLE parts (height {Int} NOT NULL REFERENCES blocks (height) ON DELETE CASCADE)`)
		e.collector(t, cleanup.Config{})
	})
}

// A key added after Install, which its triggers and checks know nothing of, does not
// wedge the queue, and costs no object it keeps alive. A batch that deleted objects
// reads the keys to the set before it commits; finding one the plan does not know, it
// rolls back (the key might be ON DELETE SET NULL, which refuses nothing: the objects
// its rows referenced would be gone), and Collect tries to follow the key. So the
// objects nothing references wait, with the one the key keeps, until the key is
// followed: nothing is deleted on a plan the schema left behind. (Before the batches
// read the keys, the free objects went at once and the pinned one was refused, 3
// deleted and 1 refused before the error; that let a key ON DELETE SET NULL lose its
// objects.) A batch that deleted nothing, only refused the pinned object, commits:
// it is counted and postponed by a grace period. One key Collect cannot follow (no
// index, or a key Install refuses) fails it, saying what to do, and every later
// Collect, until the schema is mended. Once the reference goes, the object is
// collected.
func testKeyAddedAfterInstall(t *testing.T, h harness) {
	for i, fk := range foreignKeys {
		for _, batch := range []int{1, 100} {
			t.Run(fmt.Sprintf("%s, batches of %d", fk.name, batch), func(t *testing.T) {
				e, set, c, ctx := newChainEnv(t, h, cleanup.Config{BatchSize: batch})
				for _, stmt := range fk.create {
					e.mustExec(t, stmt)
				}
				all := []string{"free1", "pinned", "free2", "free3"}
				for i, id := range all {
					_, err := set.Add(ctx, mkBlock(id, "", int64(i)))
					require.NoError(t, err)
				}
				e.mustExec(t, fk.pin, "pinned", 1)
				e.makeDue(t)

				s, err := c.Collect(ctx)
				if i == 0 {
					require.ErrorIs(t, err, cleanup.ErrUnindexed, "the new key has no index")
					assert.Contains(t, err.Error(), `CREATE INDEX "keyed_block_id_idx" ON `, "the error says what to run")
				} else {
					require.ErrorIs(t, err, refset.ErrSchema, "the new key cannot be followed")
					assert.Contains(t, err.Error(), "keyed (")
				}
				assert.Zero(t, s.Deleted, "a batch that deleted on a stale plan rolled back: %v", s)
				assert.LessOrEqual(t, s.Refused, int64(1), "%v", s)
				assert.ElementsMatch(t, all, e.ids(t, "blocks", "id"))
				s, err = c.Collect(ctx)
				require.Error(t, err, "Collect refuses while the key cannot be followed")
				assert.Zero(t, s.Reviewed, "%v", s)

				if i == 0 {
					e.mustExec(t, `CREATE INDEX keyed_block_id_idx ON keyed (block_id)`)
				} else {
					e.mustExec(t, `DROP TABLE keyed`)
				}
				s, err = c.Collect(ctx)
				require.NoError(t, err, "the schema is mended")
				assert.GreaterOrEqual(t, s.Deleted, int64(3), "the objects nothing references go: %v", s)
				if i == 0 {
					assert.Equal(t, []string{"pinned"}, e.ids(t, "blocks", "id"), "the key is followed: %v", s)
					e.mustExec(t, `DELETE FROM keyed`)
				}
				e.makeDue(t, "pinned")
				s, err = c.Collect(ctx)
				require.NoError(t, err)
				assert.Empty(t, e.ids(t, "blocks", "id"), "it stayed queued, and goes once the reference does: %v", s)
				assert.Zero(t, e.count(t, "blocks_review", ""))
			})
		}
	}
}

// An object refused again and again (a key added after Install that clean-up cannot
// follow keeps it) and due again at once (a grace period shorter than a batch) does
// not keep Collect from returning.
func testRefusedShortGrace(t *testing.T, h harness) {
	e, set, c, ctx := newChainEnv(t, h, cleanup.Config{Grace: time.Nanosecond, RetryDelay: time.Nanosecond})
	for _, stmt := range foreignKeys[1].create {
		e.mustExec(t, stmt)
	}
	_, err := set.Add(ctx, mkBlock("pinned", "", 0))
	require.NoError(t, err)
	e.mustExec(t, foreignKeys[1].pin, "pinned", 0)
	e.makeDue(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s, err := c.Collect(ctx)
	require.ErrorIs(t, err, refset.ErrSchema, "the key cannot be followed")
	require.NoError(t, ctx.Err(), "Collect went on reviewing the refused object")
	assert.Positive(t, s.Refused, "a batch that deleted nothing and refused the object commits: %v", s)
	assert.Equal(t, 1, e.count(t, "blocks_review", "object_id = ?", "pinned"), "it stays queued")
}

// addOld adds n unreferenced blocks old-00000, old-00001, ... of heights 0 to n-1,
// as a program that ran without clean-up left them.
func addOld(t *testing.T, set *refset.RefSet[block, string], n int) {
	t.Helper()
	blocks := make([]block, n)
	for i := range blocks {
		blocks[i] = mkBlock(fmt.Sprintf("old-%05d", i), "", int64(i))
	}
	_, err := set.AddAll(t.Context(), blocks)
	require.NoError(t, err)
}

// A collector started on a set that already holds objects (a program that ran
// without clean-up) reviews them: the first Install queues what is there, a grace
// period ahead, in pages of BatchSize; Check is clean at once, and once the grace
// period ends Collect deletes the unreferenced half. A later Install queues nothing
// again.
func testFirstInstallQueuesExisting(t *testing.T, h harness) {
	const n = 10000
	e, set, ctx := newChainSet(t, h)
	addOld(t, set, n)
	e.mustExec(t, `INSERT INTO heads (block_id) SELECT id FROM blocks WHERE height % 2 = 0`)
	e.mustExec(t, `INSERT INTO blocks_review (object_id, review_after) VALUES ('old-00001', `+e.past()+`)`) // queued already: kept as it is

	c := e.collector(t, cleanup.Config{Grace: time.Hour, BatchSize: 777}) // pages that end mid-way
	assert.Equal(t, n, e.count(t, "blocks_review", ""), "every object is queued once")
	report, err := c.Check(ctx)
	require.NoError(t, err)
	assert.True(t, report.OK(), "queued objects are not leaked: %+v", report)
	s, err := c.Collect(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(1), s.Deleted, "the others keep their grace period: %v", s)

	e.makeDue(t)
	s, err = c.Collect(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(n/2-1), s.Deleted, "%v", s)
	assert.Equal(t, n/2, e.count(t, "blocks", ""))
	assert.Zero(t, e.count(t, "blocks", "height % 2 = 1"), "the unreferenced half is gone")
	report, err = c.Check(ctx)
	require.NoError(t, err)
	assert.True(t, report.OK(), "%+v", report)

	e.collector(t, cleanup.Config{Grace: time.Hour})
	assert.Zero(t, e.count(t, "blocks_review", ""), "a later Install walks nothing")

	// Without the trigger for new objects (dropped by hand), objects come unqueued;
	// the next Install finds the trigger missing and queues every object again.
	newTrigger := (&refsetdriver.Plan{RegisteredQueue: "blocks_review"}).Name("new") + "_insert"
	if e.h.Types.Time == "TIMESTAMP" {
		e.mustExec(t, `DROP TRIGGER "`+newTrigger+`"`)
	} else {
		e.mustExec(t, `DROP TRIGGER "`+newTrigger+`" ON blocks`)
	}
	e.mustExec(t, `INSERT INTO blocks (id, height) VALUES ('unqueued', 0)`)
	assert.Zero(t, e.count(t, "blocks_review", ""), "the trigger is gone")
	e.collector(t, cleanup.Config{Grace: time.Hour})
	assert.Equal(t, n/2+1, e.count(t, "blocks_review", ""), "an Install after the trigger was dropped queues every object")
}

// Writers that add objects while the first Install pages through the set lose
// nothing: when Install returns, every object is queued, those it found and those
// the new trigger queued.
func testFirstInstallBesideWriters(t *testing.T, h harness) {
	const n = 3000
	e, set, ctx := newChainSet(t, h)
	addOld(t, set, n)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var added [2]int
	for w := range 2 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// IDs on both sides of the pages: before them and after them.
				id := fmt.Sprintf("%s-%05d", []string{"aaa", "zzz"}[w], i)
				if _, err := set.Add(ctx, mkBlock(id, "", 0)); err != nil {
					t.Error(err)
					return
				}
				added[w]++
			}
		})
	}
	e.collector(t, cleanup.Config{Grace: time.Hour, BatchSize: 100})
	close(stop)
	wg.Wait()
	t.Logf("added while Install ran: %v", added)
	assert.Equal(t, n+added[0]+added[1], e.count(t, "blocks", ""))
	assert.Zero(t, e.count(t, "blocks", "NOT EXISTS (SELECT 1 FROM blocks_review q WHERE q.object_id = blocks.id)"), "every object is queued")
	report, err := e.collector(t, cleanup.Config{Grace: time.Hour}).Check(ctx)
	require.NoError(t, err)
	assert.True(t, report.OK(), "%+v", report)
}

// The first Install pages through objects of every ID type a set may have.
func testFirstInstallEveryIDType(t *testing.T, h harness) {
	e := newEnv(t, h)
	e.mustExec(t, `CREATE TABLE ints (num {Int} PRIMARY KEY, name {Text} NOT NULL)`)
	e.mustExec(t, `CREATE TABLE hashes (hash {Bytes} PRIMARY KEY, name {Text} NOT NULL)`)
	ints := refset.New[intObj, int64](openStore[intObj, int64](t, e, "ints"))
	_, err := ints.AddAll(t.Context(), []intObj{{Num: -5, Name: "a"}, {Num: 3, Name: "b"}, {Num: 7, Name: "c"}, {Num: 1 << 40, Name: "d"}, {Num: 12, Name: "e"}})
	require.NoError(t, err)
	hashes := refset.New[hashObj, [32]byte](openStore[hashObj, [32]byte](t, e, "hashes"))
	_, err = hashes.AddAll(t.Context(), []hashObj{{Hash: [32]byte{1}, Name: "a"}, {Hash: [32]byte{31: 2}, Name: "b"},
		{Hash: [32]byte{0xff}, Name: "c"}, {Hash: [32]byte{0x7f, 1}, Name: "d"}, {Hash: [32]byte{0x80}, Name: "e"}})
	require.NoError(t, err)
	for _, table := range []string{"ints", "hashes"} {
		e.collector(t, cleanup.Config{Table: table, BatchSize: 2})
		assert.Equal(t, 5, e.count(t, table+"_review", ""), "%s: every object queued, in pages of 2", table)
	}
}

// A holder table added while Run runs is followed without a restart. Until its
// column has an index, the reports answer (Why names it, Check says which index is
// missing) and Run's callback is told what to create; once it exists, the next pass
// installs for the table: the object it alone holds survives, and is collected once
// its row goes.
func testHolderAddedWhileRunning(t *testing.T, h harness) {
	e := newEnv(t, h)
	set := e.chain(t)
	c := e.collector(t, cleanup.Config{Grace: 20 * time.Millisecond})
	passes := testdb.RunCollector(t, c, 5*time.Millisecond)

	e.mustExec(t, `CREATE TABLE escrow (deal {Int} NOT NULL PRIMARY KEY, block_id {Text} NOT NULL REFERENCES blocks (id) ON DELETE RESTRICT)`)
	_, err := set.Add(t.Context(), mkBlock("held", "", 0), refset.Exec[string](e.sql(`INSERT INTO escrow (deal, block_id) VALUES (1, ?)`), 1))
	require.NoError(t, err)
	_, err = set.Add(t.Context(), mkBlock("free", "", 0))
	require.NoError(t, err)

	why, err := c.Why(t.Context(), "held")
	require.NoError(t, err, "Why answers while the new column has no index")
	require.Len(t, why, 1)
	assert.Equal(t, "escrow", why[0].Table[strings.LastIndex(why[0].Table, ".")+1:])
	assert.True(t, strings.HasPrefix(why[0].Key, "deal="), why[0].Key)
	report, err := c.Check(t.Context())
	require.NoError(t, err, "Check answers while the new column has no index")
	assert.True(t, report.OK(), "%+v", report)
	require.Len(t, report.Unindexed, 1, "%+v", report)
	assert.Contains(t, report.Unindexed[0], "escrow")

	require.Eventually(t, func() bool { return len(passes.Errors()) > 0 }, 10*time.Second, 5*time.Millisecond,
		"a pass fails once it meets the object the new table holds")
	failed := passes.Errors()
	require.ErrorIs(t, failed[0], cleanup.ErrUnindexed, "the callback is told what to create")
	assert.Contains(t, failed[0].Error(), "escrow")
	assert.Equal(t, 1, e.count(t, "blocks", "id = ?", "held"))

	e.mustExec(t, `CREATE INDEX escrow_block ON escrow (block_id)`)
	require.Eventually(t, func() bool { return len(passes.Followed()) > 0 }, 10*time.Second, 5*time.Millisecond,
		"the next pass follows the new table")
	added := passes.Followed()
	assert.Len(t, added, 1)
	assert.Contains(t, added[0], "escrow.block_id")
	assert.Contains(t, fmt.Sprint(c.References()), "escrow")
	time.Sleep(50 * time.Millisecond) // passes go on, past the held object's grace period
	assert.Equal(t, 1, e.count(t, "blocks", "id = ?", "held"), "the object the new table holds survives")

	e.mustExec(t, `DELETE FROM escrow WHERE deal = 1`)
	require.Eventually(t, func() bool { return e.count(t, "blocks", "") == 0 }, 10*time.Second, 5*time.Millisecond,
		"the object goes once its row in the new table does (and the free one, which a refusing collector kept)")
	report, err = c.Check(t.Context())
	require.NoError(t, err)
	assert.True(t, report.OK(), "%+v", report)
	assert.Empty(t, report.Unindexed)
}

// Writers that add objects held by a new table, and delete rows of it, while Run
// finds the table and installs for it lose nothing: once they stop, every object
// whose row went is collected, and every object a row holds stays.
func testFollowBesideWriters(t *testing.T, h harness) {
	e := newEnv(t, h)
	set := e.chain(t)
	c := e.collector(t, cleanup.Config{Grace: 10 * time.Millisecond, RetryDelay: time.Millisecond})
	passes := testdb.RunCollector(t, c, 2*time.Millisecond)
	e.mustExec(t, `CREATE TABLE escrow (deal {Text} NOT NULL PRIMARY KEY, block_id {Text} NOT NULL REFERENCES blocks (id) ON DELETE RESTRICT)`)
	e.mustExec(t, `CREATE INDEX escrow_block ON escrow (block_id)`)

	var wg sync.WaitGroup
	deadline := time.Now().Add(time.Second)
	for w := range 2 {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				id := fmt.Sprintf("w%d-%05d", w, i)
				hold := refset.Exec[string](e.sql(`INSERT INTO escrow (block_id, deal) VALUES (?, ?)`), 1, "deal-"+id)
				if _, err := set.Add(t.Context(), mkBlock(id, "", 0), hold); err != nil {
					t.Error(err)
					return
				}
				if i%2 == 1 { // the row of the block before goes: that block is garbage
					if err := e.exec(t.Context(), `DELETE FROM escrow WHERE deal = ?`, fmt.Sprintf("deal-w%d-%05d", w, i-1)); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	held := e.count(t, "escrow", "")
	require.Eventually(t, func() bool { return strings.Contains(fmt.Sprint(c.References()), "escrow") }, 30*time.Second, 10*time.Millisecond,
		"the collector follows the new table")
	require.Eventually(t, func() bool { return e.count(t, "blocks", "") == held }, 30*time.Second, 10*time.Millisecond,
		"every block whose row went is collected")
	assert.Empty(t, passes.Errors(), "no pass failed")
	report, err := c.Check(t.Context())
	require.NoError(t, err)
	assert.True(t, report.OK(), "%+v", report)
}

// A key ON DELETE CASCADE to the set from a table the program did not declare a part
// is a warning at every Install and in Check's report, or, by
// Config.RefuseUndeclaredParts, a refusal; a declared one is neither.
func testUndeclaredCascade(t *testing.T, h harness) {
	e := newEnv(t, h)
	e.chain(t)
	e.mustExec(t, `CREATE TABLE escrow (block_id {Text} NOT NULL REFERENCES blocks (id) ON DELETE CASCADE)`)
	e.mustExec(t, `CREATE TABLE block_notes (block_id {Text} NOT NULL REFERENCES blocks (id) ON DELETE CASCADE)`)
	logger, logged := testlog.New(slog.LevelWarn)
	cfg := cleanup.Config{Table: "blocks", Parts: []string{"block_notes"}, Logger: logger}
	for range 2 {
		_, err := cleanup.Install(t.Context(), e.db, cfg)
		require.NoError(t, err)
	}
	text := logged.String()
	assert.Equal(t, 2, strings.Count(text, "level=WARN"), "one warning at each Install: %s", text)
	assert.Contains(t, text, "escrow")
	assert.NotContains(t, text, "block_notes", "a declared part is not warned of")

	inspected, err := cleanup.Inspect(t.Context(), e.db, cleanup.Config{Table: "blocks"})
	require.NoError(t, err)
	report, err := inspected.Check(t.Context())
	require.NoError(t, err)
	require.Len(t, report.UndeclaredParts, 1, "a tool that only reads knows the program's parts: %+v", report)
	assert.Contains(t, report.UndeclaredParts[0], "escrow")
	st, err := cleanup.Status(t.Context(), e.db)
	require.NoError(t, err)
	require.Len(t, st.Sets, 1)
	assert.Equal(t, report.UndeclaredParts, st.Sets[0].UndeclaredParts)

	strict := cfg
	strict.RefuseUndeclaredParts = true
	_, err = cleanup.Install(t.Context(), e.db, strict)
	require.ErrorIs(t, err, refset.ErrSchema)
	assert.Contains(t, err.Error(), "escrow")
	strict.Parts = append(strict.Parts, "escrow")
	_, err = cleanup.Install(t.Context(), e.db, strict)
	require.NoError(t, err, "declared, the key is accepted")
}

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
	err := refset.InTx(tb.Context(), e.db, func(ctx context.Context, tx refset.Tx) error {
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
func testChainInOneCollect(t *testing.T, h harness) {
	const length, batch = 1000, 100
	e, set, c, ctx := newChainEnv(t, h, cleanup.Config{BatchSize: batch})
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
func testChainStopsAtKeptBlock(t *testing.T, h harness) {
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
			e, set, c, ctx := newChainEnv(t, h, cleanup.Config{BatchSize: 100})
			ids := e.chainOf(t, "link", "", length)
			e.mustExec(t, `INSERT INTO heads (block_id) VALUES (?)`, ids[length-1])
			reviewAll(t, e, c)
			tc.keep(t, e, set, ids[kept])

			e.abandon(t, ids[length-1])
			s, err := c.Collect(ctx)
			require.NoError(t, err)
			assert.Equal(t, int64(length-kept-1), s.Deleted, "%v", s)
			assert.Equal(t, sorted(append(append([]string(nil), ids[:kept+1]...), tc.also...)...), e.ids(t, "blocks", "id"))
			assert.LessOrEqual(t, s.Batches, 5, "the walk stopped short and went on a block per batch: %v", s)
			report, err := c.Check(ctx)
			require.NoError(t, err)
			assert.True(t, report.OK(), "%+v", report)
		})
	}
}

// A table with two references to itself (a block's parent and its uncle): the walk
// follows both, and stops at a block the other one still keeps.
func testChainAlongTwoEdges(t *testing.T, h harness) {
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
func testChainReReferencedMidCollection(t *testing.T, h harness) {
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
			writerDone <- refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error {
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

// The count of objects collected that Status reports is exact: two collectors of one
// set, each in a process of its own (a handle each) with two workers, racing through
// small batches, add up to the objects gone, since each batch adds what it deleted in
// the transaction that deleted them. The count is the database's: another handle,
// as a restarted process would, reads it and adds to it.
func testCollectedCounted(t *testing.T, h harness) {
	e, _, ctx := newChainSet(t, h)
	const n = 300
	e.loose(t, "loose", n)
	cfg := cleanup.Config{BatchSize: 7, Workers: 2}
	collectors := []*cleanup.Collector{e.collector(t, cfg), (&env{h: h, db: h.reopen(t, e.db)}).collector(t, cfg)}
	e.makeDue(t)
	deleted := make([]int64, len(collectors))
	var wg sync.WaitGroup
	for i, c := range collectors {
		wg.Go(func() {
			for range 1000 {
				s, err := c.Collect(ctx)
				if !assert.NoError(t, err) {
					return
				}
				deleted[i] += s.Deleted
				if s.Reviewed == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	require.Zero(t, e.count(t, "blocks", ""), "everything collected")
	require.Equal(t, int64(n), deleted[0]+deleted[1], "the collectors' own stats")
	t.Logf("collected %d and %d", deleted[0], deleted[1])
	collected := func(db refset.Database) int64 {
		t.Helper()
		e.waitReplica(t)
		st, err := cleanup.Status(ctx, db)
		require.NoError(t, err)
		require.Len(t, st.Sets, 1)
		return st.Sets[0].Collected
	}
	require.Equal(t, int64(n), collected(e.db))

	// Another process: it reads the count, and adds to it.
	other := &env{h: h, db: h.reopen(t, e.db)}
	require.Equal(t, int64(n), collected(other.db))
	e.loose(t, "later", 5)
	e.makeDue(t)
	s, err := other.collector(t, cleanup.Config{}).Collect(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(5), s.Deleted)
	require.Equal(t, int64(n+5), collected(e.db))
}

// loose stores n blocks that nothing references, prefix-0000, prefix-0001, ...
func (e *env) loose(tb testing.TB, prefix string, n int) {
	tb.Helper()
	require.NoError(tb, refset.InTx(tb.Context(), e.db, func(ctx context.Context, tx refset.Tx) error {
		for i := range n {
			if _, err := tx.ExecContext(ctx, e.sql(`INSERT INTO blocks (id, height) VALUES (?, ?)`), fmt.Sprintf("%s-%04d", prefix, i), int64(i)); err != nil {
				return err
			}
		}
		return nil
	}))
	e.waitReplica(tb)
}

// A database whose refset tables are of the version before the count of objects
// collected (core 1): Status reads it (Collected 0) and clean-up collects without
// counting; migrated up, as the store of a program of this version does, it counts
// from then on.
func testCollectedCountAfterUpgrade(t *testing.T, h harness) {
	e, _, ctx := newChainSet(t, h)
	m, err := schema.New(e.db, schema.Config{})
	require.NoError(t, err)
	res, err := m.Migrate(ctx, schema.DirectionDown, &schema.MigrateOpts{Component: "core", TargetVersion: 1})
	require.NoError(t, err)
	require.Equal(t, "core 2 -> 1", res.String())
	collected := func() int64 {
		t.Helper()
		e.waitReplica(t)
		st, err := cleanup.Status(ctx, e.db)
		require.NoError(t, err)
		require.Len(t, st.Sets, 1)
		return st.Sets[0].Collected
	}
	collect := func(prefix string, n int) {
		t.Helper()
		c := e.collector(t, cleanup.Config{})
		e.loose(t, prefix, n)
		e.makeDue(t)
		s, err := c.Collect(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(n), s.Deleted)
	}
	collect("old", 3)
	require.Zero(t, collected(), "no count before the upgrade")

	res, err = m.Migrate(ctx, schema.DirectionUp, nil)
	require.NoError(t, err)
	require.Equal(t, "core 1 -> 2", res.String())
	require.Zero(t, collected())
	collect("new", 4)
	require.Equal(t, int64(4), collected())
}

// Status counts the rows of a table up to its cap; past it, a count is the
// database's estimate from its statistics, or, where it has none, "more than" the
// cap. The expired holds and the entries due are counted whatever the cap. A
// collector's QueueCounts (otelrefset's gauge, through Queue) counts its queue as
// Status does, and Queue is exact below DefaultCountCap.
func testCountsPastTheCap(t *testing.T, h harness) {
	e, _, ctx := newChainSet(t, h)
	col := e.collector(t, cleanup.Config{})
	e.loose(t, "o", 12)
	// Nine of the twelve due, three waiting their grace period out: overdue is
	// counted, not the queue's depth.
	var due []string
	for i := range 9 {
		due = append(due, fmt.Sprintf("o-%04d", i))
	}
	e.makeDue(t, due...)
	for i := range 12 {
		expiry := "NULL"
		if i < 3 {
			expiry = e.past()
		}
		e.mustExec(t, `INSERT INTO blocks_holds (holder, object_id, expires_at) VALUES ('h', ?, `+expiry+`)`, fmt.Sprintf("o-%04d", i))
	}
	exact, estimated, moreThan := cleanup.Exact, cleanup.Estimated, cleanup.MoreThan
	cnt := func(n int64, a cleanup.Accuracy) cleanup.Count { return cleanup.Count{N: n, Accuracy: a} }
	for _, c := range []struct {
		name    string
		analyze bool
		opts    cleanup.StatusOptions
		want    [5]cleanup.Count // objects, holds live, holds expired, queued, overdue
	}{
		{"at the cap", false, cleanup.StatusOptions{Cap: 12}, [5]cleanup.Count{cnt(12, exact), cnt(9, exact), cnt(3, exact), cnt(12, exact), cnt(9, exact)}},
		{"past the cap, no statistics", false, cleanup.StatusOptions{Cap: 11}, [5]cleanup.Count{cnt(11, moreThan), cnt(8, moreThan), cnt(3, exact), cnt(11, moreThan), cnt(9, exact)}},
		{"far past the cap, no statistics", false, cleanup.StatusOptions{Cap: 2}, [5]cleanup.Count{cnt(2, moreThan), cnt(0, moreThan), cnt(3, exact), cnt(8, moreThan), cnt(9, exact)}},
		{"exact", false, cleanup.StatusOptions{Cap: 1, Exact: true}, [5]cleanup.Count{cnt(12, exact), cnt(9, exact), cnt(3, exact), cnt(12, exact), cnt(9, exact)}},
		{"past the cap, analyzed", true, cleanup.StatusOptions{Cap: 11}, [5]cleanup.Count{cnt(12, estimated), cnt(9, estimated), cnt(3, exact), cnt(12, estimated), cnt(9, exact)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.analyze {
				// The set's own tables: a bare ANALYZE would give statistics to the
				// tables of the harnesses running beside this one, whose "no
				// statistics" case would then find some.
				for _, table := range []string{"blocks", "blocks_holds", "blocks_review"} {
					e.mustExec(t, `ANALYZE `+table)
				}
			}
			st, err := cleanup.StatusWith(ctx, e.db, c.opts)
			require.NoError(t, err)
			require.Len(t, st.Sets, 1)
			s := st.Sets[0]
			assert.Equal(t, c.want, [5]cleanup.Count{s.Objects, s.HoldsLive, s.HoldsExpired, s.Queued, s.Overdue})
			counts, err := cleanup.NewCounter(e.db, c.opts).Counts(ctx)
			require.NoError(t, err)
			assert.Equal(t, st.Sets[0].Objects, counts.Sets[0].Objects, "a Counter counts as Status does")
			queued, overdue, err := col.QueueCounts(ctx, c.opts)
			require.NoError(t, err)
			assert.Equal(t, [2]cleanup.Count{s.Queued, s.Overdue}, [2]cleanup.Count{queued, overdue}, "QueueCounts counts as Status does")
			depth, due, err := col.Queue(ctx)
			require.NoError(t, err)
			assert.Equal(t, [2]int64{12, 9}, [2]int64{depth, due}, "Queue is exact below DefaultCountCap")
		})
	}
	_, err := cleanup.StatusWith(ctx, e.db, cleanup.StatusOptions{Cap: -1})
	require.ErrorIs(t, err, refset.ErrInvalidConfig)
	_, err = cleanup.NewCounter(e.db, cleanup.StatusOptions{Cap: -1}).Counts(ctx)
	require.ErrorIs(t, err, refset.ErrInvalidConfig)
	_, _, err = col.QueueCounts(ctx, cleanup.StatusOptions{Cap: -1})
	require.ErrorIs(t, err, refset.ErrInvalidConfig)
	// A queue dropped behind the collector's back: a schema error, as before.
	e.mustExec(t, `DROP TABLE blocks_review`)
	_, _, err = col.Queue(ctx)
	require.ErrorIs(t, err, refset.ErrSchema)
}
