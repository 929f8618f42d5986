package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/refsetdb/refset/refset"
)

// writers is how many goroutines the concurrent benchmarks write from: on SQLite,
// refset groups their units of work into shared commits (store/sqlite's group
// commit), where raw sqlx pays one fsync a transaction on the same one connection;
// PostgreSQL groups WAL flushes of concurrent commits itself.
const writers = 8

// BenchmarkAddConcurrent: BenchmarkAdd's work from eight goroutines at once, on both
// sides, paired (concurrentPaired).
func BenchmarkAddConcurrent(b *testing.B) {
	forEachDB(b, func(b *testing.B, e *env) {
		ctx := context.Background()
		set := refset.New[block, string](e.store)
		insert := e.q(insertSQL)
		ops := func(n int) (refsetOp, sqlxOp func(int) error) {
			blocks := e.newBlocks(2 * n)
			for i := range blocks {
				*blocks[i].Prev = genesis // added in any order
			}
			mine, theirs := blocks[:n], blocks[n:]
			refsetOp = func(i int) error {
				_, err := set.Add(ctx, mine[i])
				return err
			}
			sqlxOp = func(i int) error { return rawAdd(ctx, e, insert, &theirs[i]) }
			return refsetOp, sqlxOp
		}
		b.Run("paired", func(b *testing.B) { concurrentPaired(b, ops) })
	})
}

// BenchmarkCompleteConcurrent: BenchmarkComplete's two-command hand-over from eight
// goroutines at once, on both sides, paired (concurrentPaired).
func BenchmarkCompleteConcurrent(b *testing.B) {
	forEachDB(b, func(b *testing.B, e *env) {
		h := newHandOvers(e)
		ops := func(n int) (refsetOp, sqlxOp func(int) error) {
			blocks := e.newBlocks(2 * n)
			e.insert(b, blocks, true)
			return h.refset(b, blocks[:n]), h.sqlx(blocks[n:])
		}
		b.Run("paired", func(b *testing.B) { concurrentPaired(b, ops) })
	})
}

// concurrentPaired runs b.N operations of each side that ops readies (before the
// timer), each side from writers goroutines at once, in rounds of writers*16
// operations that take turns at which side goes first, so that both sides see the
// machine in the same moments. It reports each side's wall time per operation
// (refset-ns/op, sqlx-ns/op) and throughput-ratio, refset's throughput over sqlx's.
func concurrentPaired(b *testing.B, ops func(n int) (refsetOp, sqlxOp func(int) error)) {
	refsetOp, sqlxOp := ops(b.N)
	sides := [2]func(int) error{refsetSide: refsetOp, sqlxSide: sqlxOp}
	var spent [2]time.Duration
	const round = writers * 16
	b.ReportAllocs()
	b.ResetTimer()
	for start, r := 0, 0; start < b.N; start, r = start+round, r+1 {
		end := min(start+round, b.N)
		for k := range 2 {
			s := (r + k) % 2
			began := time.Now()
			if err := fanOut(start, end, sides[s]); err != nil {
				b.Fatal(err)
			}
			spent[s] += time.Since(began)
		}
	}
	b.StopTimer()
	reportPaired(b, spent)
}

// fanOut runs op(i) for i in [start, end) from writers goroutines, returning the
// first error.
func fanOut(start, end int, op func(int) error) error {
	next := atomic.Int64{}
	next.Store(int64(start))
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < end; i = int(next.Add(1) - 1) {
				if err := op(i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}
