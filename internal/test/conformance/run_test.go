package conformance

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/internal/migration"
	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/schema"
	"github.com/refsetdb/refset/sqlident"
	"github.com/refsetdb/refset/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// every is a row with one column of each type a store must round-trip.
type every struct {
	Key      string     `db:"k"`
	Text     string     `db:"text_col"`
	Int64    int64      `db:"int64_col"`
	Int32    int32      `db:"int32_col"`
	Bool     bool       `db:"bool_col"`
	Float    float64    `db:"float_col"`
	Bytes    []byte     `db:"bytes_col"`
	Hash     [32]byte   `db:"hash_col"`
	Time     time.Time  `db:"time_col"`
	NullText *string    `db:"null_text"`
	NullInt  *int64     `db:"null_int"`
	NullTime *time.Time `db:"null_time"`
	Skipped  string     `db:"-"`
}

func (e every) ID() string { return e.Key }

func testRoundTrip(t *testing.T, h harness) {
	e := newEnv(t, h)
	ctx := t.Context()
	e.mustExec(t, `CREATE TABLE every (
		k {Text} PRIMARY KEY, text_col {Text} NOT NULL, int64_col {Int} NOT NULL, int32_col {Int} NOT NULL,
		bool_col {Bool} NOT NULL, float_col {Float} NOT NULL, bytes_col {Bytes}, hash_col {Bytes} NOT NULL,
		time_col {Time} NOT NULL, null_text {Text}, null_int {Int}, null_time {Time})`)
	set := refset.New[every, string](openStore[every, string](t, e, "every"))

	text, n, when := "héllo, 世界 'quoted' \"double\"", int64(-1<<62), time.Date(2026, 11, 21, 13, 14, 15, 123456000, time.UTC)
	cases := []every{
		{Key: "full", Text: text, Int64: 1<<62 + 7, Int32: -1 << 30, Bool: true, Float: 3.25, Bytes: []byte{0, 1, 2, 255},
			Hash: [32]byte{1, 2, 3, 31: 0xff}, Time: when, NullText: &text, NullInt: &n, NullTime: &when},
		{Key: "nulls", Text: "", Int64: 0, Int32: 0, Bool: false, Float: 0, Bytes: nil, Time: when.Add(-time.Hour)},
		{Key: "empty-bytes", Text: "x", Bytes: []byte{}, Time: when},
	}
	for _, want := range cases {
		t.Run(want.Key, func(t *testing.T) {
			tok, err := set.Add(ctx, want)
			require.NoError(t, err)
			lease, err := set.Get(ctx, tok)
			require.NoError(t, err)
			got := *lease.Value()
			assert.Equal(t, want.Text, got.Text)
			assert.Equal(t, want.Int64, got.Int64)
			assert.Equal(t, want.Int32, got.Int32)
			assert.Equal(t, want.Bool, got.Bool)
			assert.Equal(t, want.Float, got.Float)
			assert.Equal(t, len(want.Bytes), len(got.Bytes))
			if len(want.Bytes) > 0 {
				assert.Equal(t, want.Bytes, got.Bytes)
			}
			assert.Equal(t, want.Hash, got.Hash)
			assert.True(t, want.Time.Equal(got.Time), "time: want %v, got %v", want.Time, got.Time)
			assert.Equal(t, want.NullText, got.NullText)
			assert.Equal(t, want.NullInt, got.NullInt)
			if want.NullTime == nil {
				assert.Nil(t, got.NullTime)
			} else if assert.NotNil(t, got.NullTime) {
				assert.True(t, want.NullTime.Equal(*got.NullTime))
			}
		})
	}
}

type intObj struct {
	Num  int64  `db:"num"`
	Name string `db:"name"`
}

func (o intObj) ID() int64 { return o.Num }

type hashObj struct {
	Hash [32]byte `db:"hash"`
	Name string   `db:"name"`
}

func (o hashObj) ID() [32]byte { return o.Hash }

// roundTripID adds two objects, holds one through the holds table, and reads both
// back: the ID type must work as a key, as a query argument and as a foreign key.
func roundTripID[T refset.Identifiable[ID], ID comparable](t *testing.T, set *refset.RefSet[T, ID], a, b T, name func(T) string) {
	ctx := t.Context()
	ta, err := set.Add(ctx, a, set.Hold("tester", 0))
	require.NoError(t, err)
	_, err = set.Add(ctx, b)
	require.NoError(t, err)
	tb, err := set.Upgrade(ctx, b.ID())
	require.NoError(t, err)
	for _, tc := range []struct {
		tok  *refset.RefToken[ID]
		want T
	}{{ta, a}, {tb, b}} {
		lease, err := set.Get(ctx, tc.tok)
		require.NoError(t, err)
		assert.Equal(t, tc.want.ID(), (*lease.Value()).ID())
		assert.Equal(t, name(tc.want), name(*lease.Value()))
	}
	_, err = set.Add(ctx, a)
	require.ErrorIs(t, err, refset.ErrDuplicate)
	_, err = handOverOf(t, ta, set.Unhold("tester"), set.Hold("other", time.Hour)).Complete(ctx)
	require.NoError(t, err)
}

func testIDTypes(t *testing.T, h harness) {
	e := newEnv(t, h)
	e.mustExec(t, `CREATE TABLE strs (id {Text} PRIMARY KEY, prev {Text}, height {Int} NOT NULL, payload {Bytes})`)
	e.mustExec(t, `CREATE TABLE ints (num {Int} PRIMARY KEY, name {Text} NOT NULL)`)
	e.mustExec(t, `CREATE TABLE hashes (hash {Bytes} PRIMARY KEY, name {Text} NOT NULL)`)
	t.Run("string", func(t *testing.T) {
		set := refset.New[block, string](openStore[block, string](t, e, "strs"))
		roundTripID(t, set, mkBlock("a", "", 0), mkBlock("b", "", 1), func(b block) string { return string(b.Payload) })
	})
	t.Run("int64", func(t *testing.T) {
		set := refset.New[intObj, int64](openStore[intObj, int64](t, e, "ints"))
		roundTripID(t, set, intObj{Num: 1 << 40, Name: "big"}, intObj{Num: -5, Name: "neg"}, func(o intObj) string { return o.Name })
	})
	t.Run("[32]byte", func(t *testing.T) {
		set := refset.New[hashObj, [32]byte](openStore[hashObj, [32]byte](t, e, "hashes"))
		roundTripID(t, set, hashObj{Hash: [32]byte{1}, Name: "one"}, hashObj{Hash: [32]byte{31: 2}, Name: "two"},
			func(o hashObj) string { return o.Name })
	})
}

func testAddDuplicate(t *testing.T, h harness) {
	e, set, ctx := newBlocksEnv(t, h)
	_, err := set.Add(ctx, mkBlock("g", "", 0))
	require.NoError(t, err)

	dup := mkBlock("g", "", 99)
	dup.Payload = []byte("changed")
	ran := false
	mark := refset.CommandFunc[string](func(context.Context, refset.Tx, string) error { ran = true; return nil })
	_, err = set.Add(ctx, dup, set.Hold("x", 0), mark)
	require.ErrorIs(t, err, refset.ErrDuplicate)
	assert.False(t, ran, "no command runs after a duplicate")
	assert.Contains(t, err.Error(), "add g", "the error names the ID")

	assert.Equal(t, 1, e.count(t, "blocks", ""))
	assert.Equal(t, 0, e.count(t, "blocks_holds", ""))
	tok, err := set.Upgrade(ctx, "g")
	require.NoError(t, err)
	lease, err := set.Get(ctx, tok)
	require.NoError(t, err)
	assert.Equal(t, int64(0), lease.Value().Height, "the stored object is unchanged")
	assert.Equal(t, []byte("payload of g"), lease.Value().Payload)
}

func testUnknownID(t *testing.T, h harness) {
	e, set, ctx := newBlocksEnv(t, h)

	_, err := set.Upgrade(ctx, "nope")
	require.ErrorIs(t, err, refset.ErrNotFound)
	_, err = set.Upgrade(ctx, "nope", set.Hold("x", 0))
	require.ErrorIs(t, err, refset.ErrNotFound)

	// A token outlives its object when nothing persisted a reference to it.
	tok, err := set.Add(ctx, mkBlock("gone", "", 0))
	require.NoError(t, err)
	e.mustExec(t, `DELETE FROM blocks WHERE id = ?`, "gone")
	_, err = set.Get(ctx, tok)
	require.ErrorIs(t, err, refset.ErrNotFound)
	assert.Equal(t, 0, set.Cached())
}

func testZeroID(t *testing.T, h harness) {
	e, set, ctx := newBlocksEnv(t, h)
	_, err := set.Add(ctx, mkBlock("", "", 0))
	require.ErrorIs(t, err, refset.ErrInvalidID)
	_, err = set.Upgrade(ctx, "")
	require.ErrorIs(t, err, refset.ErrInvalidID)
	assert.Equal(t, 0, e.count(t, "blocks", ""))
}

func testLeaseSharesInstance(t *testing.T, h harness) {
	_, set, ctx := newBlocksEnv(t, h)
	tok, err := set.Add(ctx, mkBlock("a", "", 0))
	require.NoError(t, err)
	first, err := set.Get(ctx, tok)
	require.NoError(t, err)
	second, err := set.Get(ctx, tok)
	require.NoError(t, err)
	other, err := set.Upgrade(ctx, "a")
	require.NoError(t, err)
	third, err := set.Get(ctx, other)
	require.NoError(t, err)
	assert.Same(t, first.Value(), second.Value())
	assert.Same(t, first.Value(), third.Value(), "a token from Upgrade leases the same instance")
	assert.Equal(t, 1, set.Cached())
	runtime.KeepAlive(first)
}

// countingStore counts what reaches the real store: its reads, each one statement
// the database answers in one round trip, and the Gets that find their object. Each
// Get waits delay first, so that concurrent misses overlap. (On a database with a
// replica, a load that finds nothing there, not replicated yet, reads the primary
// too: one load, two reads, one of which finds it.)
type countingStore struct {
	refset.SetStore[block, string]
	delay time.Duration
	reads atomic.Int64
	found atomic.Int64
}

func (c *countingStore) Get(ctx context.Context, q refset.Querier, id string) (block, error) {
	time.Sleep(c.delay)
	c.reads.Add(1)
	b, err := c.SetStore.Get(ctx, q, id)
	if err == nil {
		c.found.Add(1)
	}
	return b, err
}

func (c *countingStore) Has(ctx context.Context, q refset.Querier, id string) (bool, error) {
	c.reads.Add(1)
	return c.SetStore.Has(ctx, q, id)
}

// newCountedEnv is a fresh env with the RFC tables, a set on them whose store counts
// what reaches it (its Gets waiting delay), and the test's context.
func newCountedEnv(t *testing.T, h harness, delay time.Duration) (*env, *countingStore, *refset.RefSet[block, string], context.Context) {
	t.Helper()
	e := newEnv(t, h)
	e.blocks(t)
	counter := &countingStore{SetStore: openStore[block, string](t, e, "blocks"), delay: delay}
	return e, counter, refset.New[block, string](counter), t.Context()
}

// testLoad: Load reads an object by its ID in one call and one read, fills the cache
// Get reads (one instance per ID, whichever call loaded it), and says ErrNotFound for
// an ID that is not stored (issue 23). Where Upgrade and Get take two reads, it takes
// one; a cached object, none.
func testLoad(t *testing.T, h harness) {
	e, counter, set, ctx := newCountedEnv(t, h, 0)
	for _, id := range []string{"a", "b", "c"} {
		_, err := set.Add(ctx, mkBlock(id, "", 0))
		require.NoError(t, err)
	}
	e.waitReplica(t) // the reads counted are the replica's, which has the objects
	notFoundReads := int64(1)
	if h.Standby {
		notFoundReads = 2 // the replica's miss, then the primary's answer
	}
	reads := func(fn func()) int64 {
		t.Helper()
		before := counter.reads.Load()
		fn()
		return counter.reads.Load() - before
	}

	// Every lease taken below stays alive to the end, so that the cache shrinks only
	// if refset drops a leased instance: "nothing cached" compares counts.
	var kept []refset.Lease[block]
	defer runtime.KeepAlive(&kept)
	var first refset.Lease[block]
	assert.Equal(t, int64(1), reads(func() {
		var err error
		first, err = set.Load(ctx, "a")
		require.NoError(t, err)
	}), "a miss: one read")
	assert.Equal(t, "a", first.Value().Hash)
	assert.Equal(t, []byte("payload of a"), first.Value().Payload)

	assert.Equal(t, int64(0), reads(func() {
		again, err := set.Load(ctx, "a")
		require.NoError(t, err)
		assert.Same(t, first.Value(), again.Value(), "a second Load")
	}), "a hit: no read")

	t.Run("Get shares Load's instance", func(t *testing.T) {
		tok, err := set.Upgrade(ctx, "a")
		require.NoError(t, err)
		got := reads(func() {
			lease, err := set.Get(ctx, tok)
			require.NoError(t, err)
			assert.Same(t, first.Value(), lease.Value())
		})
		assert.Equal(t, int64(0), got, "Get of what Load loaded")
	})

	t.Run("Load shares Get's instance", func(t *testing.T) {
		tok, err := set.Upgrade(ctx, "b")
		require.NoError(t, err)
		var viaGet refset.Lease[block]
		assert.Equal(t, int64(1), reads(func() {
			viaGet, err = set.Get(ctx, tok)
			require.NoError(t, err)
		}))
		kept = append(kept, viaGet)
		assert.Equal(t, int64(0), reads(func() {
			viaLoad, err := set.Load(ctx, "b")
			require.NoError(t, err)
			assert.Same(t, viaGet.Value(), viaLoad.Value())
		}), "Load of what Get loaded")
		runtime.KeepAlive(viaGet)
	})

	t.Run("Upgrade and Get take two reads, Load one", func(t *testing.T) {
		assert.Equal(t, int64(2), reads(func() {
			tok, err := set.Upgrade(ctx, "c")
			require.NoError(t, err)
			lease, err := set.Get(ctx, tok)
			require.NoError(t, err)
			kept = append(kept, lease)
		}))
	})

	for _, tc := range []struct {
		name  string
		id    string
		want  error
		reads int64
	}{
		{"not stored", "nope", refset.ErrNotFound, notFoundReads},
		{"the zero ID", "", refset.ErrInvalidID, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cached := set.Cached()
			got := reads(func() {
				_, err := set.Load(ctx, tc.id)
				require.ErrorIs(t, err, tc.want)
				assert.Contains(t, err.Error(), "load")
			})
			assert.Equal(t, tc.reads, got)
			assert.Equal(t, cached, set.Cached(), "nothing cached")
		})
	}

	t.Run("collected", func(t *testing.T) {
		_, err := set.Add(ctx, mkBlock("gone", "", 0))
		require.NoError(t, err)
		e.mustExec(t, `DELETE FROM blocks WHERE id = ?`, "gone")
		_, err = set.Load(ctx, "gone")
		require.ErrorIs(t, err, refset.ErrNotFound)
	})
	runtime.KeepAlive(first)
}

// waitCacheEmpty collects garbage until the set holds no instance, or fails after a
// bound: cleanups run after a collection, on their own goroutine.
func waitCacheEmpty[T refset.Identifiable[ID], ID comparable](t *testing.T, set *refset.RefSet[T, ID]) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for set.Cached() > 0 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	require.Equal(t, 0, set.Cached(), "instances still cached after every lease was dropped")
}

// testCacheFrees: many objects loaded and read at once by eight goroutines, then let
// go, leave nothing cached. The cache is the core's, the same on every backend; 20,000
// objects take it through many garbage collections and map growths, and one instance
// kept per object (a cleanup not run, a map entry not removed) fails the test all
// the same.
func testCacheFrees(t *testing.T, h harness) {
	const n = 20_000
	e, set, ctx := newBlocksEnv(t, h)
	// Load the rows in bulk: the point is the cache, not the inserts.
	require.NoError(t, refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error {
		for start := 0; start < n; start += 500 {
			q, args := "INSERT INTO blocks (id, height) VALUES ", []any{}
			for i := start; i < start+500; i++ {
				if i > start {
					q += ", "
				}
				q += "(?, ?)"
				args = append(args, fmt.Sprintf("b%06d", i), i)
			}
			if _, err := tx.ExecContext(ctx, e.sql(q), args...); err != nil {
				return err
			}
		}
		return nil
	}))

	concurrently(t, 8, func(w int) error {
		for i := w; i < n; i += 8 {
			tok, err := set.Upgrade(ctx, fmt.Sprintf("b%06d", i))
			if err == nil {
				var lease refset.Lease[block]
				lease, err = set.Get(ctx, tok)
				if err == nil && lease.Value().Height != int64(i) {
					err = fmt.Errorf("b%06d has height %d", i, lease.Value().Height)
				}
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	waitCacheEmpty(t, set)
}

// concurrently runs fn(0) to fn(n-1) at once, each on a goroutine of its own, and
// fails t with every error they returned.
func concurrently(t *testing.T, n int, fn func(i int) error) {
	t.Helper()
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = fn(i)
		}()
	}
	close(start)
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
}

func testConcurrentMisses(t *testing.T, h harness) {
	_, store, set, ctx := newCountedEnv(t, h, 50*time.Millisecond)
	tok, err := set.Add(ctx, mkBlock("hot", "", 0))
	require.NoError(t, err)

	const n = 64
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	leases := make([]*block, n)
	errs := make([]error, n)
	for i := range n {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			mine, err := set.Upgrade(ctx, "hot")
			ready.Done()
			if err != nil {
				errs[i] = err
				return
			}
			<-start
			lease, err := set.Get(ctx, mine)
			leases[i], errs[i] = lease.Value(), err
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		assert.Same(t, leases[0], leases[i])
	}
	assert.Equal(t, int64(1), store.found.Load(), "64 concurrent misses on one ID read it once")
	runtime.KeepAlive(tok)
}

func testAddAll(t *testing.T, h harness) {
	e, set, ctx := newBlocksEnv(t, h)
	// More rows than one statement takes, and not a multiple of it.
	objs := make([]block, 2345)
	for i := range objs {
		objs[i] = mkBlock(fmt.Sprintf("bulk-%05d", i), "", int64(i))
	}
	toks, err := set.AddAll(ctx, objs)
	require.NoError(t, err)
	require.Len(t, toks, len(objs))
	assert.Equal(t, len(objs), e.count(t, "blocks", ""))
	for _, i := range []int{0, 999, 1000, 2344} {
		lease, err := set.Get(ctx, toks[i])
		require.NoError(t, err)
		assert.Equal(t, objs[i].Payload, lease.Value().Payload)
		assert.Equal(t, int64(i), lease.Value().Height)
	}

	// One duplicate, far into the list: nothing is stored.
	more := []block{mkBlock("new-1", "", 0), mkBlock("new-2", "", 0), objs[2000]}
	_, err = set.AddAll(ctx, more)
	require.ErrorIs(t, err, refset.ErrDuplicate)
	assert.Equal(t, len(objs), e.count(t, "blocks", ""))

	// Inside a caller's transaction, a failure leaves the transaction usable.
	require.NoError(t, refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error {
		if _, err := set.AddAllTx(ctx, tx, more); !errors.Is(err, refset.ErrDuplicate) {
			return fmt.Errorf("want ErrDuplicate, got %v", err)
		}
		_, err := set.AddAllTx(ctx, tx, more[:2])
		return err
	}))
	assert.Equal(t, len(objs)+2, e.count(t, "blocks", ""))

	_, err = set.AddAll(ctx, []block{mkBlock("", "", 0)})
	require.ErrorIs(t, err, refset.ErrInvalidID)
	toks, err = set.AddAll(ctx, nil)
	require.NoError(t, err)
	assert.Empty(t, toks)
}

// completer and controller are the RFC's two components: the completer keeps a
// pending row for the blocks it holds, the controller a heads row.
func (e *env) releasePending() refset.Command[string] {
	return refset.Exec[string](e.sql(`DELETE FROM pending WHERE block_id = ?`), 1)
}

func (e *env) acquireHead() refset.Command[string] {
	return refset.Exec[string](e.sql(`INSERT INTO heads (block_id) VALUES (?)`), 1)
}

// handOverOf returns tok released with release and acquired with acquire, ready to
// complete, failing tb if either is refused.
func handOverOf[ID comparable](tb testing.TB, tok *refset.RefToken[ID], release refset.Command[ID], acquire ...refset.Command[ID]) *refset.Acquired[ID] {
	tb.Helper()
	rel, err := tok.Release(release)
	require.NoError(tb, err)
	acq, err := rel.Acquire(acquire...)
	require.NoError(tb, err)
	return acq
}

func testHandOver(t *testing.T, h harness) {
	e, set, ctx := newBlocksEnv(t, h)
	// completes completes acq, which must move id from pending to heads.
	completes := func(t *testing.T, acq *refset.Acquired[string], id string) {
		t.Helper()
		got, err := acq.Complete(ctx)
		require.NoError(t, err)
		assert.Equal(t, id, got.ID())
		assert.Equal(t, 0, e.count(t, "pending", "block_id = ?", id))
		assert.Equal(t, 1, e.count(t, "heads", "block_id = ?", id))
	}

	t.Run("commits both", func(t *testing.T) {
		tok, err := set.Add(ctx, mkBlock("a", "", 0), e.insertPending())
		require.NoError(t, err)
		require.Equal(t, 1, e.count(t, "pending", "block_id = ?", "a"))
		acq := handOverOf(t, tok, e.releasePending(), e.acquireHead())
		completes(t, acq, "a")
	})

	t.Run("a failing acquire commits neither and the token stays usable", func(t *testing.T) {
		tok, err := set.Add(ctx, mkBlock("b", "", 0), e.insertPending())
		require.NoError(t, err)
		// The controller already has a head row for b: its insert fails.
		e.mustExec(t, `INSERT INTO heads (block_id) VALUES (?)`, "b")
		acq := handOverOf(t, tok, e.releasePending(), e.acquireHead())
		_, err = acq.Complete(ctx)
		require.ErrorIs(t, err, refset.ErrDuplicate)
		assert.Equal(t, 1, e.count(t, "pending", "block_id = ?", "b"), "the release was rolled back")

		// Fix the cause; the same token completes.
		e.mustExec(t, `DELETE FROM heads WHERE block_id = ?`, "b")
		completes(t, acq, "b")
	})

	t.Run("a release of what was not held fails the hand-over", func(t *testing.T) {
		tok, err := set.Add(ctx, mkBlock("c", "", 0))
		require.NoError(t, err)
		acq := handOverOf(t, tok, e.releasePending(), e.acquireHead())
		_, err = acq.Complete(ctx)
		require.ErrorIs(t, err, refset.ErrNotFound)
		assert.Equal(t, 0, e.count(t, "heads", "block_id = ?", "c"))
	})
}

func (e *env) insertPending() refset.Command[string] {
	return refset.Exec[string](e.sql(`INSERT INTO pending (block_id) VALUES (?)`), 1)
}

func testTokenSingleUse(t *testing.T, h harness) {
	e, set, ctx := newBlocksEnv(t, h)
	var releases, acquires atomic.Int64
	countRelease := refset.CommandFunc[string](func(context.Context, refset.Tx, string) error { releases.Add(1); return nil })
	countAcquire := refset.CommandFunc[string](func(context.Context, refset.Tx, string) error { acquires.Add(1); return nil })

	tok, err := set.Add(ctx, mkBlock("a", "", 0))
	require.NoError(t, err)
	rel, err := tok.Release(countRelease)
	require.NoError(t, err)
	_, err = tok.Release(countRelease)
	require.ErrorIs(t, err, refset.ErrTokenConsumed, "a second Release")
	_, err = set.Get(ctx, tok)
	require.ErrorIs(t, err, refset.ErrTokenConsumed, "a Get through a released token")

	acq, err := rel.Acquire(countAcquire)
	require.NoError(t, err)
	_, err = rel.Acquire(countAcquire)
	require.ErrorIs(t, err, refset.ErrTokenConsumed, "a second Acquire")

	next, err := acq.Complete(ctx)
	require.NoError(t, err)
	_, err = acq.Complete(ctx)
	require.ErrorIs(t, err, refset.ErrTokenConsumed, "a second Complete")
	tx, err := e.db.Begin(ctx)
	require.NoError(t, err)
	_, err = acq.CompleteTx(ctx, tx)
	require.ErrorIs(t, err, refset.ErrTokenConsumed, "a CompleteTx after Complete")
	require.NoError(t, tx.Rollback())
	assert.Equal(t, int64(1), releases.Load(), "the release command ran once")
	assert.Equal(t, int64(1), acquires.Load(), "the acquire command ran once")

	// The token Complete returned is a fresh one.
	lease, err := set.Get(ctx, next)
	require.NoError(t, err)
	assert.Equal(t, "a", lease.Value().Hash)

	// Nil tokens and nil commands are refused, not dereferenced.
	var none *refset.RefToken[string]
	_, err = none.Release()
	require.ErrorIs(t, err, refset.ErrInvalidToken)
	_, err = set.Get(ctx, none)
	require.ErrorIs(t, err, refset.ErrInvalidToken)
	_, err = next.Release(nil)
	require.ErrorIs(t, err, refset.ErrInvalidCommand)
	_, err = next.Release()
	require.NoError(t, err, "a refused Release leaves the token usable")
}

// Two goroutines completing the same Acquired at once: exactly one runs the commands.
func testConcurrentComplete(t *testing.T, h harness) {
	e, set, ctx := newBlocksEnv(t, h)
	for round := range 20 {
		id := string(rune('a' + round))
		tok, err := set.Add(ctx, mkBlock(id, "", 0), e.insertPending())
		require.NoError(t, err)
		acq := handOverOf(t, tok, e.releasePending(), e.acquireHead())
		var wins, consumed atomic.Int64
		concurrently(t, 4, func(int) error {
			_, err := acq.Complete(ctx)
			switch {
			case err == nil:
				wins.Add(1)
			case errors.Is(err, refset.ErrTokenConsumed):
				consumed.Add(1)
			default:
				return fmt.Errorf("complete: %w", err)
			}
			return nil
		})
		assert.Equal(t, int64(1), wins.Load())
		assert.Equal(t, int64(3), consumed.Load())
		assert.Equal(t, 1, e.count(t, "heads", "block_id = ?", id))
	}
}

func testRefusesDeletingHeld(t *testing.T, h harness) {
	e, set, ctx := newBlocksEnv(t, h)
	_, err := set.Add(ctx, mkBlock("held", "", 0), set.Hold("keeper", 0))
	require.NoError(t, err)
	_, err = set.Add(ctx, mkBlock("head", "", 0), e.acquireHead())
	require.NoError(t, err)
	_, err = set.Add(ctx, mkBlock("parent", "", 0))
	require.NoError(t, err)
	_, err = set.Add(ctx, mkBlock("child", "parent", 1), set.Hold("keeper", 0))
	require.NoError(t, err)

	for _, id := range []string{"held", "head", "parent"} {
		err := e.exec(ctx, `DELETE FROM blocks WHERE id = ?`, id)
		require.ErrorIs(t, err, refset.ErrReferenced, id)
		assert.Equal(t, 1, e.count(t, "blocks", "id = ?", id), "%s is still there", id)
	}
	// With every reference gone, the database lets it go.
	require.NoError(t, e.exec(ctx, `DELETE FROM blocks_holds WHERE object_id = ?`, "held"))
	require.NoError(t, e.exec(ctx, `DELETE FROM blocks WHERE id = ?`, "held"))
}

func testReferenceToMissing(t *testing.T, h harness) {
	e, set, ctx := newBlocksEnv(t, h)
	err := e.exec(ctx, `INSERT INTO heads (block_id) VALUES (?)`, "ghost")
	require.ErrorIs(t, err, refset.ErrNotFound)
	_, err = set.Add(ctx, mkBlock("orphan", "ghost", 1))
	require.ErrorIs(t, err, refset.ErrNotFound, "a block whose predecessor is missing")
	assert.Equal(t, 0, e.count(t, "blocks", ""))

	// A hold taken through a token whose object has since gone is refused too.
	tok, err := set.Add(ctx, mkBlock("brief", "", 0))
	require.NoError(t, err)
	e.mustExec(t, `DELETE FROM blocks WHERE id = ?`, "brief")
	rel, err := tok.Release()
	require.NoError(t, err)
	acq, err := rel.Acquire(set.Hold("late", 0))
	require.NoError(t, err)
	_, err = acq.Complete(ctx)
	require.ErrorIs(t, err, refset.ErrNotFound)
	assert.Equal(t, 0, e.count(t, "blocks_holds", ""))
}

func testHolds(t *testing.T, h harness) {
	e, set, ctx := newBlocksEnv(t, h)
	tok, err := set.Add(ctx, mkBlock("a", "", 0), set.Hold("completer", 0))
	require.NoError(t, err)
	assert.Equal(t, 1, e.count(t, "blocks_holds", "holder = ? AND object_id = ? AND expires_at IS NULL", "completer", "a"))

	// The hold moves from one holder to another atomically, with an expiry.
	tok, err = handOverOf(t, tok, set.Unhold("completer"), set.Hold("controller", time.Hour)).Complete(ctx)
	require.NoError(t, err)
	assert.Equal(t, 0, e.count(t, "blocks_holds", "holder = ?", "completer"))
	assert.Equal(t, 1, e.count(t, "blocks_holds", "holder = ? AND expires_at IS NOT NULL", "controller"))

	// Unholding what one does not hold stops the hand-over and changes nothing.
	_, err = handOverOf(t, tok, set.Unhold("completer"), set.Hold("third", 0)).Complete(ctx)
	require.ErrorIs(t, err, refset.ErrNotFound)
	assert.Equal(t, 0, e.count(t, "blocks_holds", "holder = ?", "third"))

	// Bad holds are refused.
	_, err = set.Upgrade(ctx, "a", set.Hold("", 0))
	require.ErrorIs(t, err, refset.ErrInvalidCommand)
	_, err = set.Upgrade(ctx, "a", set.Hold("x", -time.Second))
	require.ErrorIs(t, err, refset.ErrInvalidCommand)

	// Holding again renews; two holders hold independently.
	_, err = set.Upgrade(ctx, "a", set.Hold("controller", 0), set.Hold("auditor", 0))
	require.NoError(t, err)
	assert.Equal(t, 1, e.count(t, "blocks_holds", "holder = ? AND expires_at IS NULL", "controller"))
	assert.Equal(t, 2, e.count(t, "blocks_holds", "object_id = ?", "a"))
}

func testCancelledContext(t *testing.T, h harness) {
	e := newEnv(t, h)
	set := e.blocks(t)
	tok, err := set.Add(t.Context(), mkBlock("a", "", 0), e.insertPending())
	require.NoError(t, err)

	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = set.Add(cancelled, mkBlock("b", "", 0))
	require.ErrorIs(t, err, context.Canceled)
	_, err = set.Upgrade(cancelled, "a")
	require.Error(t, err)
	_, err = set.Get(cancelled, tok)
	require.Error(t, err)

	acq := handOverOf(t, tok, e.releasePending(), e.acquireHead())
	_, err = acq.Complete(cancelled)
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 1, e.count(t, "blocks", ""))
	assert.Equal(t, 1, e.count(t, "pending", ""))
	assert.Equal(t, 0, e.count(t, "heads", ""))

	// A context that ends while the hand-over's commands run rolls all of it back.
	tok2, err := set.Add(t.Context(), mkBlock("c", "", 0), e.insertPending())
	require.NoError(t, err)
	acq2 := handOverOf(t, tok2, e.releasePending(), e.acquireHead(), refset.CommandFunc[string](func(ctx context.Context, _ refset.Tx, _ string) error {
		<-ctx.Done()
		return ctx.Err()
	}))
	slow, stop := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer stop()
	_, err = acq2.Complete(slow)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, 1, e.count(t, "pending", "block_id = ?", "c"))
	assert.Equal(t, 0, e.count(t, "heads", ""))

	// And the first hand-over still completes with a live context.
	_, err = acq.Complete(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 0, e.count(t, "pending", "block_id = ?", "a"))
	assert.Equal(t, 1, e.count(t, "heads", ""))
}

func testBadIdentifiers(t *testing.T, h harness) {
	e := newEnv(t, h)
	e.blocks(t)
	e.mustExec(t, `CREATE TABLE x (id {Int} PRIMARY KEY)`)
	ctx := t.Context()
	for _, cfg := range []store.Config{
		{Table: "blocks; DROP TABLE x"},
		{Table: `blocks" ; DROP TABLE x; --`},
		{Table: "blocks", IDColumn: "id; DROP TABLE x"},
		{Table: "blocks", HoldsTable: "h; DROP TABLE x"},
		{Table: ""},
		{Table: "a.b.c"},
		{Table: "1blocks"},
		{Table: "blocks", HoldsTable: "schema.h"},
	} {
		t.Run(cfg.Table+"|"+cfg.IDColumn+"|"+cfg.HoldsTable, func(t *testing.T) {
			_, err := store.NewStore[block, string](ctx, e.db, cfg)
			require.ErrorIs(t, err, refset.ErrInvalidIdentifier)
		})
	}
	assert.Equal(t, 0, e.count(t, "x", ""), "table x survived every attempt")
}

func testSchemaMismatch(t *testing.T, h harness) {
	e := newEnv(t, h)
	e.blocks(t)
	e.mustExec(t, `CREATE TABLE nokey (id {Text}, height {Int})`)
	e.mustExec(t, `CREATE TABLE twokeys (id {Text}, prev {Text}, height {Int}, payload {Bytes}, PRIMARY KEY (id, prev))`)

	cases := []struct {
		name string
		open func(context.Context) error
	}{
		{"no such table", newStoreOf[block](e, store.Config{Table: "nosuch"})},
		{"no primary key", newStoreOf[block](e, store.Config{Table: "nokey"})},
		{"two-column primary key", newStoreOf[block](e, store.Config{Table: "twokeys"})},
		{"id column not the key", newStoreOf[block](e, store.Config{Table: "blocks", IDColumn: "height"})},
		{"missing column", newStoreOf[missingColumn](e, store.Config{Table: "blocks"})},
		{"unsupported field type", newStoreOf[unsupported](e, store.Config{Table: "blocks"})},
		{"ID type differs from the key field", newStoreOf[wrongID](e, store.Config{Table: "blocks"})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.open(t.Context())
			require.ErrorIs(t, err, refset.ErrSchema)
			t.Log(err)
		})
	}
}

// note is the object of testUnmappedNotNull: an ID and a body, on tables with a third
// column it does not map.
type note struct {
	Key  string `db:"id"`
	Body string `db:"body"`
}

func (n note) ID() string { return n.Key }

// testUnmappedNotNull: NewStore refuses a NOT NULL column without a default that no
// field maps, which would fail every Add, naming the column and the tag to add, and
// creates nothing; it accepts the columns the database fills itself, and an Add then
// works.
func testUnmappedNotNull(t *testing.T, h harness) {
	e := newEnv(t, h)
	ctx := t.Context()
	cases := []struct {
		name     string
		extra    string // the unmapped column's declaration
		postgres bool   // Postgres only
		refused  bool
	}{
		{name: "not null", extra: "owner {Text} NOT NULL", refused: true},
		{name: "not null int", extra: "owner {Int} NOT NULL", refused: true},
		{name: "nullable", extra: "owner {Text}"},
		{name: "not null with a default", extra: "owner {Text} NOT NULL DEFAULT 'nobody'"},
		{name: "not null with a default expression", extra: "owner {Int} NOT NULL DEFAULT (1 + 1)"},
		{name: "generated", extra: "owner {Text} GENERATED ALWAYS AS (body || '!') STORED NOT NULL"},
		{name: "serial", extra: "owner bigserial", postgres: true},
		{name: "identity", extra: "owner bigint GENERATED ALWAYS AS IDENTITY", postgres: true},
		{name: "identity by default", extra: "owner bigint NOT NULL GENERATED BY DEFAULT AS IDENTITY", postgres: true},
		{name: "domain with a default", extra: "owner notes_owner NOT NULL", postgres: true},
	}
	if h.Postgres {
		e.mustExec(t, `CREATE DOMAIN notes_owner AS text DEFAULT 'nobody'`)
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.postgres && !h.Postgres {
				t.Skip("a PostgreSQL column type")
			}
			table := fmt.Sprintf("notes%d", i)
			e.mustExec(t, fmt.Sprintf(`CREATE TABLE %s (id {Text} NOT NULL PRIMARY KEY, body {Text} NOT NULL, %s)`, table, tc.extra))
			s, err := store.NewStore[note, string](ctx, e.db, store.Config{Table: table})
			holds, herr := e.db.Driver().SchemaSQL().TableExists(ctx, e.db.Driver().Pool(), sqlident.Ident{Name: table + "_holds"})
			require.NoError(t, herr)
			if tc.refused {
				require.ErrorIs(t, err, refset.ErrSchema)
				require.ErrorContains(t, err, `column "owner"`)
				require.ErrorContains(t, err, "`db:\"owner\"`")
				require.False(t, holds, "a refused store created its holds table")
				t.Log(err)
				return
			}
			require.NoError(t, err)
			require.True(t, holds)
			_, err = refset.New[note, string](s).Add(ctx, note{Key: "n1", Body: "hello"})
			require.NoError(t, err)
			e.waitReplica(t)
			require.Equal(t, 1, e.count(t, table, "id = ?", "n1"))
		})
	}
}

// newStoreOf is a case of testSchemaMismatch: building a store of T on cfg, which
// must fail.
func newStoreOf[T refset.Identifiable[string]](e *env, cfg store.Config) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := store.NewStore[T, string](ctx, e.db, cfg)
		return err
	}
}

// The mismatch cases' types; embedding block makes them Identifiable.
type missingColumn struct {
	block
	Extra string `db:"extra"`
}

type unsupported struct {
	block
	Ch chan int `db:"ch"`
}

type wrongID struct {
	Num int64 `db:"id"`
}

func (wrongID) ID() string { return "x" }

func testUnitOfWork(t *testing.T, h harness) {
	e := newEnv(t, h)
	blocks := e.blocks(t)
	e.mustExec(t, `CREATE TABLE batches (num {Int} PRIMARY KEY, name {Text} NOT NULL)`)
	e.mustExec(t, `CREATE TABLE receipts (block_id {Text} NOT NULL REFERENCES blocks (id), note {Text} NOT NULL)`)
	batches := refset.New[intObj, int64](openStore[intObj, int64](t, e, "batches"))
	ctx := t.Context()
	failure := errors.New("the receipts could not be written")

	// Two sets, a hold and the caller's own SQL: all or nothing.
	unit := func(id string, num int64, fail bool) error {
		return refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error {
			if _, err := blocks.AddTx(ctx, tx, mkBlock(id, "", 0), blocks.Hold("node", 0)); err != nil {
				return err
			}
			if _, err := batches.AddTx(ctx, tx, intObj{Num: num, Name: id}); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, e.sql(`INSERT INTO receipts (block_id, note) VALUES (?, ?)`), id, "ok"); err != nil {
				return err
			}
			if fail {
				return failure
			}
			return nil
		})
	}
	require.ErrorIs(t, unit("rolled-back", 1, true), failure)
	for _, table := range []string{"blocks", "batches", "receipts", "blocks_holds"} {
		assert.Equal(t, 0, e.count(t, table, ""), table)
	}
	require.NoError(t, unit("committed", 2, false))
	for _, table := range []string{"blocks", "batches", "receipts", "blocks_holds"} {
		assert.Equal(t, 1, e.count(t, table, ""), table)
	}

	// An Upgrade and a hand-over inside the caller's transaction commit with it.
	require.NoError(t, refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error {
		tok, err := blocks.UpgradeTx(ctx, tx, "committed")
		if err != nil {
			return err
		}
		rel, err := tok.Release(blocks.Unhold("node"))
		if err != nil {
			return err
		}
		acq, err := rel.Acquire(e.acquireHead())
		if err != nil {
			return err
		}
		_, err = acq.CompleteTx(ctx, tx)
		return err
	}))
	assert.Equal(t, 0, e.count(t, "blocks_holds", ""))
	assert.Equal(t, 1, e.count(t, "heads", ""))
}

func testTxFormsKeepCallerTx(t *testing.T, h harness) {
	e, set, ctx := newBlocksEnv(t, h)
	_, err := set.Add(ctx, mkBlock("a", "", 0))
	require.NoError(t, err)

	err = refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error {
		// A duplicate inside the caller's transaction fails alone...
		if _, err := set.AddTx(ctx, tx, mkBlock("a", "", 0)); !errors.Is(err, refset.ErrDuplicate) {
			return fmt.Errorf("want ErrDuplicate, got %v", err)
		}
		// ...as does a hand-over whose command fails...
		tok, err := set.UpgradeTx(ctx, tx, "a")
		if err != nil {
			return err
		}
		rel, _ := tok.Release(e.releasePending())
		acq, _ := rel.Acquire(e.acquireHead())
		if _, err := acq.CompleteTx(ctx, tx); !errors.Is(err, refset.ErrNotFound) {
			return fmt.Errorf("want ErrNotFound, got %v", err)
		}
		// ...and the transaction goes on.
		_, err = set.AddTx(ctx, tx, mkBlock("b", "a", 1))
		return err
	})
	require.NoError(t, err)
	assert.Equal(t, 2, e.count(t, "blocks", ""))
	assert.Equal(t, 0, e.count(t, "heads", ""))

	_, err = set.AddTx(ctx, nil, mkBlock("c", "", 0))
	require.ErrorIs(t, err, refset.ErrInvalidTx)
}

// testConcurrentWriters: 32 goroutines adding and handing over at once all succeed;
// on SQLite none sees "database is locked".
func testConcurrentWriters(t *testing.T, h harness) {
	e, set, ctx := newBlocksEnv(t, h)
	const writers, each = 32, 10
	concurrently(t, writers, func(w int) error {
		var errs []error
		for i := range each {
			id := fmt.Sprintf("w%02d-%02d", w, i)
			tok, err := set.Add(ctx, mkBlock(id, "", 0), e.insertPending())
			if err == nil {
				var rel *refset.Released[string]
				if rel, err = tok.Release(e.releasePending()); err == nil {
					var acq *refset.Acquired[string]
					if acq, err = rel.Acquire(e.acquireHead()); err == nil {
						_, err = acq.Complete(ctx)
					}
				}
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", id, err))
			}
		}
		return errors.Join(errs...)
	})
	assert.Equal(t, writers*each, e.count(t, "heads", ""))
	assert.Equal(t, 0, e.count(t, "pending", ""))
}

// Migrations run once per database, however often and from however many processes
// they are asked for: a version recorded is never applied again. The test component's
// migrations log every run of theirs in a table without a key, so a second run shows.
func testMigrate(t *testing.T, h harness) {
	e := newEnv(t, h)
	e.createBlocks(t)
	ctx := t.Context()
	d := e.db.Driver().SchemaSQL()
	logged := fstest.MapFS{
		"0001_log.sql":  {Data: []byte(e.sql(`CREATE TABLE migration_runs (version {Int} NOT NULL); INSERT INTO migration_runs (version) VALUES (1)`))},
		"0002_more.sql": {Data: []byte(`INSERT INTO migration_runs (version) VALUES (2)`)},
	}
	migrate := func(db refset.Database) error {
		m, err := schema.New(db, schema.Config{Components: []schema.Component{{Name: "logged", Migrations: logged}}})
		if err != nil {
			return err
		}
		if _, err := m.Migrate(ctx, schema.DirectionUp, nil); err != nil {
			return err
		}
		_, err = store.NewStore[block, string](ctx, db, store.Config{Table: "blocks"})
		return err
	}
	// Several handles on a database refset has not seen yet, as several processes would
	// have, migrating and building the same store (which migrates the set) at once; then
	// the same twice more.
	others := make([]refset.Database, 4)
	for i := range others {
		others[i] = h.reopen(t, e.db)
	}
	concurrently(t, len(others), func(i int) error { return migrate(others[i]) })
	require.NoError(t, migrate(e.db))
	require.NoError(t, migrate(e.db))
	assert.Equal(t, []string{"1", "2"}, e.ids(t, "migration_runs", "version"), "each migration ran once")

	versions := map[string]int{"logged": 2}
	for component, kind := range map[string]string{"core": "core", "set:blocks": "set"} {
		ms, err := migration.Dialect(d, kind, false)
		require.NoError(t, err)
		versions[component] = ms[len(ms)-1].Version
	}
	for component, want := range versions {
		var got int
		require.NoError(t, e.db.Reader().QueryRowContext(ctx, e.sql(`SELECT version FROM refset_schema_version WHERE component = ?`), component).Scan(&got))
		assert.Equal(t, want, got, component)
	}
	var sets int
	require.NoError(t, e.db.Reader().QueryRowContext(ctx, `SELECT COUNT(*) FROM refset_sets`).Scan(&sets))
	assert.Equal(t, 1, sets, "one set registered")
}

func testClosed(t *testing.T, h harness) {
	e, set, ctx := newBlocksEnv(t, h)
	tok, err := set.Add(ctx, mkBlock("a", "", 0))
	require.NoError(t, err)
	closer, ok := e.db.(interface{ Close() error })
	require.True(t, ok)
	require.NoError(t, closer.Close())
	_, err = set.Add(ctx, mkBlock("b", "", 0))
	require.ErrorIs(t, err, refset.ErrClosed)
	_, err = set.Upgrade(ctx, "a")
	require.ErrorIs(t, err, refset.ErrClosed)
	_, err = set.Get(ctx, tok)
	require.ErrorIs(t, err, refset.ErrClosed)
}

// onCallersPools opens a fresh database of h on pools the test opened itself, as a
// caller's (testdb.Options.CallersPools), and returns it with those pools.
func onCallersPools(t *testing.T, h harness) (*env, testdb.Pools) {
	t.Helper()
	return onCallersPoolsWith(t, h, options)
}

// onCallersPoolsWith is onCallersPools with opts.
func onCallersPoolsWith(t *testing.T, h harness, opts testdb.Options) (*env, testdb.Pools) {
	t.Helper()
	opts.CallersPools = true
	e := &env{h: h, db: h.Open(t, opts)}
	return e, testdb.PoolsOf(t, e.db)
}

// testCallersPools: a database the store's New made on pools the caller opened
// itself (testdb.Options.CallersPools) serves a set, and shares those pools with the
// caller's own SQL, each seeing what the other wrote. Close leaves the pools the
// caller's: refset's reads, writes and units give refset.ErrClosed, changing nothing,
// closing again does nothing (as Close promises: nil), and every pool still pings
// and still runs the caller's statements.
func testCallersPools(t *testing.T, h harness) {
	e, pools := onCallersPools(t, h)
	ctx := t.Context()
	require.Same(t, pools.Writer, e.db.Driver().Pool(), "the database writes on the caller's pool")

	// The caller makes the tables on its pool; the set is on them.
	for _, stmt := range blocksStatements() {
		_, err := pools.Writer.ExecContext(ctx, e.sql(stmt))
		require.NoError(t, err)
	}
	e.waitReplica(t)
	set := refset.New[block, string](openStore[block, string](t, e, "blocks"))
	tok, err := set.Add(ctx, mkBlock("a", "", 0), set.Hold("me", 0))
	require.NoError(t, err)
	lease, err := set.Get(ctx, tok)
	require.NoError(t, err)
	assert.Equal(t, []byte("payload of a"), lease.Value().Payload)

	// What the caller writes on its pool, refset reads; what refset writes, the
	// caller reads on each of its pools.
	_, err = pools.Writer.ExecContext(ctx, e.sql(`INSERT INTO blocks (id, prev, height) VALUES (?, ?, ?)`), "mine", "a", 1)
	require.NoError(t, err)
	e.waitReplica(t)
	mine, err := set.Upgrade(ctx, "mine", set.Hold("me", 0))
	require.NoError(t, err)
	lease, err = set.Get(ctx, mine)
	require.NoError(t, err)
	assert.Equal(t, int64(1), lease.Value().Height)
	e.waitReplica(t)
	countHolds := e.sql(`SELECT COUNT(*) FROM blocks_holds WHERE holder = ?`)
	holdsOn := func(pool *sql.DB) int {
		t.Helper()
		var n int
		require.NoError(t, pool.QueryRowContext(ctx, countHolds, "me").Scan(&n))
		return n
	}
	for i, pool := range pools.All() {
		assert.Equal(t, 2, holdsOn(pool), "the holds refset took, read on the caller's pool %d", i)
	}
	// An object no lease holds, so that the reads below must ask the database.
	_, err = pools.Writer.ExecContext(ctx, e.sql(`INSERT INTO blocks (id, prev, height) VALUES (?, ?, ?)`), "unread", "a", 1)
	require.NoError(t, err)
	e.waitReplica(t)
	unread, err := set.Upgrade(ctx, "unread")
	require.NoError(t, err)

	closer, ok := e.db.(interface{ Close() error })
	require.True(t, ok)
	require.NoError(t, closer.Close())
	require.NoError(t, closer.Close(), "closing again does nothing")
	// Every call of refset that asks the database gives ErrClosed: its reads outside a
	// unit of work too, on the primary and on a replica, though the caller's pools they
	// ran on stay open.
	_, err = set.Get(ctx, unread)
	require.ErrorIs(t, err, refset.ErrClosed, "Get")
	_, err = set.Load(ctx, "unread")
	require.ErrorIs(t, err, refset.ErrClosed, "Load")
	_, err = set.Upgrade(ctx, "a")
	require.ErrorIs(t, err, refset.ErrClosed, "Upgrade without commands")
	var n int
	err = refset.Reader(ctx, e.db).QueryRowContext(ctx, countHolds, "me").Scan(&n)
	require.ErrorIs(t, err, refset.ErrClosed, "refset.Reader")
	_, err = set.Add(ctx, mkBlock("b", "", 0))
	require.ErrorIs(t, err, refset.ErrClosed)
	_, err = set.Upgrade(ctx, "a", set.Hold("after", 0))
	require.ErrorIs(t, err, refset.ErrClosed)
	_, err = handOverOf(t, mine, set.Unhold("me")).Complete(ctx)
	require.ErrorIs(t, err, refset.ErrClosed)
	err = refset.InTx(ctx, e.db, func(context.Context, refset.Tx) error { return nil })
	require.ErrorIs(t, err, refset.ErrClosed)
	_, err = e.db.Begin(ctx)
	require.ErrorIs(t, err, refset.ErrClosed)

	for i, pool := range pools.All() {
		require.NoError(t, pool.PingContext(ctx), "the caller's pool %d stays open", i)
		assert.Equal(t, 2, holdsOn(pool), "the caller's pool %d still reads", i)
	}
	_, err = pools.Writer.ExecContext(ctx, e.sql(`DELETE FROM blocks_holds WHERE holder = ?`), "me")
	require.NoError(t, err, "the caller's pool still writes")
}

// testCallersPoolsClosedFirst: a caller that closes its pools before the database
// made on them gets refset.ErrClosed, saying so, from every call that reaches the
// database (not a refused statement or a schema mismatch, which database/sql's error
// for a closed pool looked like), and the database's Close still returns nil.
func testCallersPoolsClosedFirst(t *testing.T, h harness) {
	e, pools := onCallersPools(t, h)
	ctx := t.Context()
	set := e.blocks(t)
	_, err := set.Add(ctx, mkBlock("a", "", 0), set.Hold("me", 0))
	require.NoError(t, err)
	e.waitReplica(t)
	held, err := set.Upgrade(ctx, "a")
	require.NoError(t, err)

	for _, pool := range pools.All() {
		require.NoError(t, pool.Close())
	}
	calls := []struct {
		name string
		call func() error
	}{
		{"Add", func() error { _, err := set.Add(ctx, mkBlock("b", "", 0)); return err }},
		{"Upgrade", func() error { _, err := set.Upgrade(ctx, "a"); return err }},
		{"Upgrade with a command", func() error { _, err := set.Upgrade(ctx, "a", set.Hold("you", 0)); return err }},
		{"Get", func() error { _, err := set.Get(ctx, held); return err }},
		{"Load", func() error { _, err := set.Load(ctx, "a"); return err }},
		{"InTx", func() error {
			return refset.InTx(ctx, e.db, func(context.Context, refset.Tx) error { return nil })
		}},
		{"Reader", func() error {
			rows, err := refset.Reader(ctx, e.db).QueryContext(ctx, `SELECT COUNT(*) FROM blocks`)
			if err == nil {
				rows.Close()
			}
			return err
		}},
		// A Row's Scan returns database/sql's own error, which the database translates.
		{"Reader's row, translated", func() error {
			var n int
			err := refset.Reader(ctx, e.db).QueryRowContext(ctx, `SELECT COUNT(*) FROM blocks`).Scan(&n)
			return e.db.TranslateError(err, "")
		}},
	}
	for _, c := range calls {
		err := c.call()
		require.ErrorIs(t, err, refset.ErrClosed, c.name)
		assert.Contains(t, err.Error(), "close the database first", c.name)
	}
	closer, ok := e.db.(interface{ Close() error })
	require.True(t, ok)
	require.NoError(t, closer.Close())
}

// testTwoDatabasesOnOnePool: two components of a program, each making its database
// with the store's New on the same pools of the caller's, work side by side on them
// (the same statements, prepared by each on the same connections), and one closing
// its database leaves the other working: Close frees only what its own database
// prepared.
func testTwoDatabasesOnOnePool(t *testing.T, h harness) {
	// One connection on PostgreSQL, so that both prepare theirs on it.
	opts := options
	opts.MaxConns = 1
	first, _ := onCallersPoolsWith(t, h, opts)
	ctx := t.Context()
	sets := []*refset.RefSet[block, string]{first.blocks(t)}
	second := &env{h: h, db: testdb.AlsoOn(t, first.db, opts)}
	sets = append(sets, refset.New[block, string](openStore[block, string](t, second, "blocks")))
	envs := []*env{first, second}
	round := func(which int, id string) error {
		e, set := envs[which], sets[which]
		tok, err := set.Add(ctx, mkBlock(id, "", 0), e.insertPending())
		if err != nil {
			return err
		}
		if _, err := set.Get(ctx, tok); err != nil {
			return err
		}
		head, err := handOverOf(t, tok, e.releasePending(), e.acquireHead()).Complete(ctx)
		if err != nil {
			return err
		}
		_, err = set.Load(ctx, head.ID())
		return err
	}
	// Enough rounds each for every statement to be prepared, on the same connections.
	for i := range 5 {
		for which := range sets {
			require.NoError(t, round(which, fmt.Sprintf("d%d-%d", which, i)))
		}
	}
	closer, ok := first.db.(interface{ Close() error })
	require.True(t, ok)
	require.NoError(t, closer.Close())
	for i := range 5 {
		require.NoError(t, round(1, fmt.Sprintf("after-%d", i)), "the other database, after the first closed")
	}
	second.waitReplica(t)
	assert.Equal(t, 15, second.count(t, "heads", ""))
	assert.Zero(t, second.count(t, "pending", ""))
}

// testCloseWhileInUse: a program that closes its database while goroutines still add,
// hand over and read (a node shutting down) gets, from each call, its result or
// refset.ErrClosed, never another error, a panic or a wait; and the database, opened
// again, shows every call as it answered: an Add told done stored its block with its
// pending row, one told closed stored nothing; a hand-over told done moved the block
// to heads, one told closed left it pending. On the pools Open made and on the
// caller's own.
func testCloseWhileInUse(t *testing.T, h harness) {
	for _, callers := range []bool{false, true} {
		t.Run(fmt.Sprintf("callers=%v", callers), func(t *testing.T) {
			e := newEnv(t, h)
			if callers {
				e, _ = onCallersPools(t, h)
			}
			set := e.blocks(t)
			ctx := t.Context()
			const workers = 8
			type outcome struct{ added, handed bool }
			outcomes := make([]map[string]outcome, workers) // each worker's IDs, as its calls answered
			errs := make([]error, workers)
			var underWay, stopped sync.WaitGroup
			for w := range workers {
				outcomes[w] = map[string]outcome{}
				underWay.Add(1)
				stopped.Add(1)
				go func() {
					defer stopped.Done()
					var once sync.Once
					defer once.Do(underWay.Done)
					for i := 0; ; i++ {
						if i == 3 {
							once.Do(underWay.Done)
						}
						id := fmt.Sprintf("w%d-%d", w, i)
						outcomes[w][id] = outcome{}
						tok, err := set.Add(ctx, mkBlock(id, "", 0), e.insertPending())
						if err == nil {
							outcomes[w][id] = outcome{added: true}
							_, err = set.Get(ctx, tok)
						}
						if err == nil {
							_, err = handOverOf(t, tok, e.releasePending(), e.acquireHead()).Complete(ctx)
						}
						if err != nil {
							if !errors.Is(err, refset.ErrClosed) {
								errs[w] = fmt.Errorf("%s: %w", id, err)
							}
							return
						}
						outcomes[w][id] = outcome{added: true, handed: true}
					}
				}()
			}
			underWay.Wait()
			closer, ok := e.db.(interface{ Close() error })
			require.True(t, ok)
			require.NoError(t, closer.Close())
			stopped.Wait()
			require.NoError(t, errors.Join(errs...), "a call failed otherwise than with ErrClosed")

			again := &env{h: h, db: h.reopen(t, e.db)}
			again.waitReplica(t)
			rows := map[string]map[string]bool{}
			for _, table := range []string{"blocks", "pending", "heads"} {
				rows[table] = map[string]bool{}
				column := "block_id"
				if table == "blocks" {
					column = "id"
				}
				for _, id := range again.ids(t, table, column) {
					rows[table][id] = true
				}
			}
			answered := 0
			for _, ids := range outcomes {
				for id, o := range ids {
					answered++
					stored, pending, head := rows["blocks"][id], rows["pending"][id], rows["heads"][id]
					switch {
					case o.handed:
						assert.True(t, head && !pending, "%s was told handed over: pending %v, head %v", id, pending, head)
					case o.added:
						assert.True(t, pending && !head, "%s was told added, its hand-over closed: pending %v, head %v", id, pending, head)
					default:
						assert.False(t, stored, "%s was told closed: nothing stored", id)
					}
				}
			}
			assert.Len(t, rows["blocks"], len(rows["pending"])+len(rows["heads"]), "a block half handed over")
			t.Logf("%d Adds answered, the last of each worker's ErrClosed", answered)
		})
	}
}

// A refused foreign key means the same whatever the SQL looks like: deleting a
// referenced block is refset.ErrReferenced, referencing a missing one
// refset.ErrNotFound, however the statement is written and wherever it runs. SQLite
// gives both the same code, so its store must read the statement to tell them apart.
func testForeignKeyErrorsWhateverTheSQL(t *testing.T, h harness) {
	e, set, ctx := newBlocksEnv(t, h)
	_, err := set.Add(ctx, mkBlock("held", "", 0), e.acquireHead())
	require.NoError(t, err)
	// A key without ON DELETE RESTRICT (NO ACTION, the default) fails otherwise than a
	// RESTRICT one on SQLite: as a foreign key (787), not as a trigger (1811).
	e.mustExec(t, `CREATE TABLE receipts (block_id {Text} NOT NULL REFERENCES blocks (id))`)
	_, err = set.Add(ctx, mkBlock("noted", "", 0), refset.Exec[string](e.sql(`INSERT INTO receipts (block_id) VALUES (?)`), 1))
	require.NoError(t, err)
	_, err = set.Add(ctx, mkBlock("carrier", "", 0), set.Hold("tester", 0))
	require.NoError(t, err)

	deletes := []string{
		`DELETE FROM blocks WHERE id = ?`,
		`delete from blocks where id = ?`,
		"-- the block is still referenced\nDELETE FROM blocks WHERE id = ?",
		`/* the block is still referenced */ DELETE FROM blocks WHERE id = ?`,
		`WITH doomed AS (SELECT id FROM blocks WHERE id = ?) DELETE FROM blocks WHERE id IN (SELECT id FROM doomed)`,
		`WITH RECURSIVE doomed (id) AS MATERIALIZED (SELECT id FROM blocks WHERE id = ? AND height >= 0) /* ) */
		 DELETE FROM blocks WHERE id IN (SELECT id FROM doomed)`,
	}

	refusals := []struct {
		name  string
		want  error
		arg   string
		forms []string
	}{
		{"delete of a block referenced ON DELETE RESTRICT", refset.ErrReferenced, "held", deletes},
		{"delete of a block referenced by a plain key", refset.ErrReferenced, "noted", deletes},
		{"reference to a missing block", refset.ErrNotFound, "ghost", []string{
			`INSERT INTO heads (block_id) VALUES (?)`,
			`insert into heads (block_id) values (?)`,
			"-- the controller takes it\nINSERT INTO heads (block_id) VALUES (?)",
			`/* the controller takes it */ INSERT INTO heads (block_id) VALUES (?)`,
			`WITH src AS (SELECT CAST(? AS {Text}) AS id) INSERT INTO heads (block_id) SELECT id FROM src`,
			`INSERT INTO heads (block_id) VALUES (?) ON CONFLICT (block_id) DO NOTHING`,
		}},
	}
	// runners are the places a user's statement runs: its own unit of work, a Command
	// of a hand-over that refset runs, and the same hand-over inside a unit of work.
	runners := []struct {
		name string
		run  func(t *testing.T, q string, arg string) error
	}{
		{"InTx", func(t *testing.T, q, arg string) error {
			return refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error {
				_, err := tx.ExecContext(ctx, q, arg)
				return err
			})
		}},
		{"Command via Complete", func(t *testing.T, q, arg string) error {
			_, err := e.handOver(t, set, q, arg).Complete(ctx)
			return err
		}},
		{"Command via CompleteTx in InTx", func(t *testing.T, q, arg string) error {
			acq := e.handOver(t, set, q, arg)
			return refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error {
				_, err := acq.CompleteTx(ctx, tx)
				return err
			})
		}},
	}
	for _, r := range refusals {
		t.Run(r.name, func(t *testing.T) {
			for _, run := range runners {
				for _, q := range r.forms {
					t.Run(run.name+"/"+q, func(t *testing.T) {
						err := run.run(t, e.sql(q), r.arg)
						require.ErrorIs(t, err, r.want)
						assert.Equal(t, 3, e.count(t, "blocks", ""), "nothing was deleted")
						assert.Equal(t, 1, e.count(t, "heads", ""), "nothing was referenced")
						assert.Equal(t, 1, e.count(t, "receipts", ""), "nothing was referenced")
						assert.Equal(t, 1, e.count(t, "blocks_holds", "holder = ?", "tester"), "the hand-over was undone")
					})
				}
			}
		})
	}
}

// handOver is a hand-over of carrier whose one command runs q with arg: it drops the
// tester's hold first, so a refusal must undo that too.
func (e *env) handOver(tb testing.TB, set *refset.RefSet[block, string], q, arg string) *refset.Acquired[string] {
	tb.Helper()
	tok, err := set.Upgrade(tb.Context(), "carrier")
	require.NoError(tb, err)
	return handOverOf(tb, tok, set.Unhold("tester"), refset.CommandFunc[string](func(ctx context.Context, tx refset.Tx, _ string) error {
		_, err := tx.ExecContext(ctx, q, arg)
		return err
	}))
}

// Tables dropped and made again (a test fixture reset, DROP SCHEMA ... CASCADE on
// Postgres) take refset's tables of the set with them, while refset's bookkeeping
// (refset_schema_version, refset_sets) may live elsewhere and stay, recording
// migrations whose tables are gone. A store built on the new tables makes what it
// needs again instead of failing on a missing holds table.
func testTablesDroppedAndMadeAgain(t *testing.T, h harness) {
	e, set, ctx := newBlocksEnv(t, h)
	_, err := set.Add(ctx, mkBlock("before", "", 0), set.Hold("keeper", 0))
	require.NoError(t, err)

	for _, table := range []string{"heads", "pending", "blocks_holds", "blocks_review", "blocks"} {
		e.mustExec(t, `DROP TABLE `+table)
	}
	e.createBlocks(t)
	s, err := store.NewStore[block, string](ctx, e.db, store.Config{Table: "blocks"})
	require.NoError(t, err, "a store on tables made again")
	set = refset.New(s)
	tok, err := set.Add(ctx, mkBlock("after", "", 0), set.Hold("keeper", 0))
	require.NoError(t, err)
	_, err = set.Get(ctx, tok)
	require.NoError(t, err)
	assert.Equal(t, 1, e.count(t, "blocks_holds", "object_id = ?", "after"))
	assert.Equal(t, 0, e.count(t, "blocks_review", ""), "the review queue is there again")
	require.ErrorIs(t, e.exec(ctx, `DELETE FROM blocks WHERE id = ?`, "after"), refset.ErrReferenced,
		"the new holds table references the new blocks table")
}

// A store reads through statements it prepared. A migration that changes what a
// mapped column is (renamed away, and a column of another type added under its name)
// makes Postgres refuse such a statement ("cached plan must not change result type")
// on every connection that prepared it, until it is prepared again; SQLite prepares
// it again by itself. Either way reads go on without the program being restarted.
func testReadsSurviveSchemaChange(t *testing.T, h harness) {
	e := newEnv(t, h)
	ctx := t.Context()
	e.mustExec(t, `CREATE TABLE named (num {Int} PRIMARY KEY, name {Text} NOT NULL)`)
	store := openStore[intObj, int64](t, e, "named")
	_, err := refset.New(store).Add(ctx, intObj{Num: 1, Name: "one"})
	require.NoError(t, err)

	steps := []struct {
		migration []string
		want      string
	}{
		{nil, "one"},
		{[]string{`ALTER TABLE named RENAME COLUMN name TO old_name`,
			`ALTER TABLE named ADD COLUMN name {Bytes} NOT NULL DEFAULT ''`}, ""},
	}
	for _, step := range steps {
		for _, m := range step.migration {
			e.mustExec(t, m)
		}
		for range 3 { // enough to reuse a pooled connection's statement
			got, err := store.Get(ctx, e.db.Reader(), 1)
			require.NoError(t, err, "after %q", step.migration)
			assert.Equal(t, intObj{Num: 1, Name: step.want}, got)
			found, err := store.Has(ctx, e.db.Reader(), 1)
			require.NoError(t, err)
			assert.True(t, found)
		}
	}
}

// Race bounds: a round takes a few milliseconds, so both outcomes show within tens of
// rounds; the bounds only stop a broken store, or a loaded machine, from running long.
const (
	raceMinRounds = 200
	raceMaxRounds = 3000
	raceMaxTime   = 45 * time.Second
	// raceHeadStart is the most one side waits before it starts, so that each side
	// sometimes starts first, and the two often overlap.
	raceHeadStart = 2 * time.Millisecond
)

// An object nothing references is deleted (by plain SQL, or by a collector) while a
// goroutine takes a reference to it. Each round ends one of two ways: the reference
// is in place and the object present, or the reference was refused
// (refset.ErrNotFound) and the object is gone; never a reference to a missing object,
// never another error. The test runs rounds until it has seen both ways (a race one
// side always wins tests only that side), within the bounds above.
func testReferenceRaceBothWays(t *testing.T, h harness) {
	deleters := []struct {
		name string
		// start readies e for this way of deleting and returns it: a delete of id that
		// reports an error only if something went wrong (a delete the database refuses
		// because id is referenced is a lost race, not an error).
		start func(t *testing.T, e *env) func(id string) error
	}{
		{"plain DELETE", func(t *testing.T, e *env) func(string) error {
			return func(id string) error {
				err := e.exec(t.Context(), `DELETE FROM blocks WHERE id = ?`, id)
				if errors.Is(err, refset.ErrReferenced) {
					return nil
				}
				return err
			}
		}},
		{"collector", func(t *testing.T, e *env) func(string) error {
			c := e.collector(t, cleanup.Config{})
			t.Cleanup(func() {
				report, err := c.Check(context.Background())
				assert.NoError(t, err)
				assert.Zero(t, report.Dangling)
			})
			return func(string) error {
				_, err := c.Collect(t.Context())
				return err
			}
		}},
	}
	for _, d := range deleters {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel() // each on a database of its own
			e := newEnv(t, h)
			set := e.chain(t)
			del := d.start(t, e)
			ctx := t.Context()
			var referenced, deleted, rounds int
			deadline := time.Now().Add(raceMaxTime)
			for ; rounds < raceMaxRounds && time.Now().Before(deadline); rounds++ {
				if rounds >= raceMinRounds && referenced > 0 && deleted > 0 {
					break
				}
				id := fmt.Sprintf("r%05d", rounds)
				_, err := set.Add(ctx, mkBlock(id, "", 0))
				require.NoError(t, err)
				e.makeDue(t, id) // for a collector: due at once, not after the grace period

				// Alternate which side may be held back, by a random part of the head start.
				refDelay, delDelay := time.Duration(rand.Int64N(int64(raceHeadStart))), time.Duration(0)
				if rounds%2 == 1 {
					refDelay, delDelay = delDelay, refDelay
				}
				var wg sync.WaitGroup
				var refErr, delErr error
				start := make(chan struct{})
				wg.Add(2)
				go func() {
					defer wg.Done()
					<-start
					time.Sleep(refDelay)
					_, refErr = set.Upgrade(ctx, id, e.acquireHead())
				}()
				go func() {
					defer wg.Done()
					<-start
					time.Sleep(delDelay)
					delErr = del(id)
				}()
				close(start)
				wg.Wait()
				require.NoError(t, delErr, "round %d", rounds)

				present := e.count(t, "blocks", "id = ?", id) == 1
				headed := e.count(t, "heads", "block_id = ?", id) == 1
				switch {
				case refErr == nil:
					require.True(t, present && headed, "round %d: reference taken, yet present=%v headed=%v", rounds, present, headed)
					referenced++
					// Drop the reference and the object, so rounds do not pile up garbage.
					e.mustExec(t, `DELETE FROM heads WHERE block_id = ?`, id)
				case errors.Is(refErr, refset.ErrNotFound):
					require.False(t, present || headed, "round %d: refused, yet present=%v headed=%v", rounds, present, headed)
					deleted++
				default:
					t.Fatalf("round %d: an error of another kind: %v", rounds, refErr)
				}
			}
			t.Logf("%d rounds: the reference won %d, the delete %d", rounds, referenced, deleted)
			assert.Positive(t, referenced, "in %d rounds the reference never won", rounds)
			assert.Positive(t, deleted, "in %d rounds the delete never won", rounds)
		})
	}
}
