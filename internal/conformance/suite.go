package conformance

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// suiteTest is one test of a suite, run against the store a Harness describes.
type suiteTest struct {
	name string
	fn   func(t *testing.T, h Harness)
}

// runParallel runs each test as a parallel subtest.
func runParallel(t *testing.T, h Harness, tests []suiteTest) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h)
		})
	}
}

// Run runs the whole suite against the store h describes.
func Run(t *testing.T, h Harness) {
	runParallel(t, h, []suiteTest{
		{"RoundTripColumnTypes", testRoundTrip},
		{"IDTypes", testIDTypes},
		{"AddDuplicate", testAddDuplicate},
		{"AddAll", testAddAll},
		{"UnknownID", testUnknownID},
		{"ZeroID", testZeroID},
		{"LeaseSharesInstance", testLeaseSharesInstance},
		{"CacheFreesReleasedObjects", testCacheFrees},
		{"ConcurrentMissesLoadOnce", testConcurrentMisses},
		{"ReadsSurviveSchemaChange", testReadsSurviveSchemaChange},
		{"HandOver", testHandOver},
		{"TokenSingleUse", testTokenSingleUse},
		{"DatabaseRefusesDeletingHeld", testRefusesDeletingHeld},
		{"ReferenceToMissingObject", testReferenceToMissing},
		{"ForeignKeyErrorsWhateverTheSQL", testForeignKeyErrorsWhateverTheSQL},
		{"Holds", testHolds},
		{"CancelledContext", testCancelledContext},
		{"BadIdentifiers", testBadIdentifiers},
		{"SchemaMismatch", testSchemaMismatch},
		{"UnitOfWork", testUnitOfWork},
		{"TxFormsKeepCallerTxUsable", testTxFormsKeepCallerTx},
		{"ConcurrentWriters", testConcurrentWriters},
		{"ConcurrentHandOversOfOneToken", testConcurrentComplete},
		{"ReferenceRaceBothWays", testReferenceRaceBothWays},
		{"MigrateTwiceAndConcurrently", testMigrate},
		{"TablesDroppedAndMadeAgain", testTablesDroppedAndMadeAgain},
		{"Closed", testClosed},
	})
}

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

func testRoundTrip(t *testing.T, h Harness) {
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
	rel, err := ta.Release(set.Unhold("tester"))
	require.NoError(t, err)
	acq, err := rel.Acquire(set.Hold("other", time.Hour))
	require.NoError(t, err)
	_, err = acq.Complete(ctx)
	require.NoError(t, err)
}

func testIDTypes(t *testing.T, h Harness) {
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

func testAddDuplicate(t *testing.T, h Harness) {
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

func testUnknownID(t *testing.T, h Harness) {
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

func testZeroID(t *testing.T, h Harness) {
	e, set, ctx := newBlocksEnv(t, h)
	_, err := set.Add(ctx, mkBlock("", "", 0))
	require.ErrorIs(t, err, refset.ErrInvalidID)
	_, err = set.Upgrade(ctx, "")
	require.ErrorIs(t, err, refset.ErrInvalidID)
	assert.Equal(t, 0, e.count(t, "blocks", ""))
}

func testLeaseSharesInstance(t *testing.T, h Harness) {
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

func testCacheFrees(t *testing.T, h Harness) {
	const n = 100_000
	e, set, ctx := newBlocksEnv(t, h)
	// Load the rows in bulk: the point is the cache, not the inserts.
	require.NoError(t, refset.InTx(ctx, e.db, func(tx refset.Tx) error {
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

	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
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
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	waitCacheEmpty(t, set)
}

// countingStore counts the loads that reach the real store and find the object, and
// makes each take a while, so concurrent misses overlap. (On a database with a
// replica, a load that finds nothing there, not replicated yet, reads the primary
// too: one load, two reads, one of which finds it.)
type countingStore struct {
	refset.SetStore[block, string]
	gets atomic.Int64
}

func (c *countingStore) Get(ctx context.Context, q refset.Querier, id string) (block, error) {
	time.Sleep(50 * time.Millisecond)
	b, err := c.SetStore.Get(ctx, q, id)
	if err == nil {
		c.gets.Add(1)
	}
	return b, err
}

func testConcurrentMisses(t *testing.T, h Harness) {
	e := newEnv(t, h)
	e.blocks(t)
	store := &countingStore{SetStore: openStore[block, string](t, e, "blocks")}
	set := refset.New[block, string](store)
	ctx := t.Context()
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
	assert.Equal(t, int64(1), store.gets.Load(), "64 concurrent misses on one ID read it once")
	runtime.KeepAlive(tok)
}

func testAddAll(t *testing.T, h Harness) {
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
	require.NoError(t, refset.InTx(ctx, e.db, func(tx refset.Tx) error {
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
