package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/refsetdb/refset/blockmanager"
	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/postgres"
)

// The scale benchmarks do the same work on PostgreSQL sets of very different sizes,
// REFSET_BENCH_SCALE objects (default 1,000,000 and 10,000,000): what refset costs
// must follow the work done, not the size of the set. The sets are bulk-loaded with
// COPY, in transactions of scaleChunk rows, before clean-up is installed (or with its
// triggers off), as a set whose objects were all reviewed long ago; loading 10,000,000
// takes minutes.
//
//   - BenchmarkScaleSet, on the clean-up benchmarks' set (an object table and a root
//     table referencing every object):
//   - Collect: REFSET_BENCH_GARBAGE unreferenced objects (default 100,000), loaded
//     and made due before the timer starts, collected by one Collect; ns/object;
//   - GetMiss: RefSet.Get of objects the set has never read, at random across the
//     set (their tokens made before the timer), against the store's SELECT by
//     primary key of random objects with sqlx;
//   - Add: RefSet.Add of a new object (clean-up's trigger queues it), against BEGIN,
//     the store's INSERT, COMMIT with sqlx;
//     both paired, an operation of each side per iteration (see paired).
//   - BenchmarkScaleBranch: a block chain of that many blocks (blockmanager's tables,
//     100-byte payloads), and Branch walking REFSET_BENCH_WALK blocks (default
//     10,000) down from the tip; ns/block.
//
// Collect runs before Add, whose objects, unreferenced, would otherwise be collected
// with the garbage.

// scaleChunk is how many rows one COPY transaction loads.
const scaleChunk = 500_000

func scaleSizes(b *testing.B) []int {
	return envInts(b, "REFSET_BENCH_SCALE", []int{1_000_000, 10_000_000})
}

// BenchmarkScaleSet: collect, Get miss and Add on sets of each size.
func BenchmarkScaleSet(b *testing.B) {
	for _, size := range scaleSizes(b) {
		b.Run(fmt.Sprintf("objects=%d", size), func(b *testing.B) { scaleSet(b, size) })
	}
}

func scaleSet(b *testing.B, size int) {
	ctx := context.Background()
	e := gcOpen(b, onLibPQ)
	start := time.Now()
	set, c := scaleSetup(b, e, size)
	b.Logf("loaded %d objects and their roots in %s", size, time.Since(start).Round(time.Second))
	pool := e.db.(*postgres.DB).Pool()

	garbage := envInt(b, "REFSET_BENCH_GARBAGE", 100_000)
	round := 0
	b.Run(fmt.Sprintf("Collect/garbage=%d", garbage), func(b *testing.B) { timeCollects(b, e, c, garbage, &round) })

	// Random live objects, each read once by the set: a Get that misses its cache and
	// finds the row wherever the set has put it.
	rng := rand.New(rand.NewPCG(uint64(size), 7))
	read := map[int]bool{}
	fresh := func() string {
		for {
			i := rng.IntN(size)
			if !read[i] && len(read) < size {
				read[i] = true
				return fmt.Sprintf("live-%07d", i)
			}
		}
	}
	b.Run("GetMiss", func(b *testing.B) {
		b.StopTimer()
		toks := make([]*refset.RefToken[string], b.N)
		ids := make([]string, b.N)
		for i := range toks {
			tok, err := set.Upgrade(ctx, fresh())
			must(b, err)
			toks[i] = tok
			ids[i] = fmt.Sprintf("live-%07d", rng.IntN(size))
		}
		b.StartTimer()
		pairedOps(b, func(i int) error {
			lease, err := set.Get(ctx, toks[i])
			if err == nil {
				sinkString = lease.Value().Key
			}
			return err
		}, func(i int) error {
			var o gcObj
			err := pool.GetContext(ctx, &o, `SELECT "id" FROM "objs" WHERE "id" = $1`, ids[i])
			sinkString = o.Key
			return err
		})
	})

	added := 0
	b.Run("Add", func(b *testing.B) {
		pairedOps(b, func(int) error {
			added++
			_, err := set.Add(ctx, gcObj{Key: fmt.Sprintf("added-refset-%09d", added)})
			return err
		}, func(int) error {
			added++
			tx, err := pool.BeginTxx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if _, err := tx.ExecContext(ctx, `INSERT INTO "objs" ("id") VALUES ($1)`, fmt.Sprintf("added-sqlx-%09d", added)); err != nil {
				return err
			}
			return tx.Commit()
		})
	})
}

var sinkString string

// scaleSetup is gcEnv.setup loading in chunks: the live objects, each referenced by
// a root, then the store and clean-up (a long grace period: the benchmark makes its
// garbage due itself), then statistics.
func scaleSetup(b *testing.B, e *gcEnv, live int) (*refset.RefSet[gcObj, string], *cleanup.Collector) {
	b.Helper()
	ctx := context.Background()
	for _, stmt := range strings.Split(e.typeMap.Replace(gcSchema), ";") {
		e.exec(b, stmt)
	}
	liveID := func(i int) []any { return []any{fmt.Sprintf("live-%07d", i)} }
	loadChunked(b, e, "objs", []string{"id"}, live, liveID)
	loadChunked(b, e, "roots", []string{"obj_id"}, live, liveID)
	db := e.db.(*postgres.DB)
	setStore, err := store.NewStore[gcObj, string](ctx, db, store.Config{Table: "objs"})
	must(b, err)
	c, err := store.NewCollector(ctx, db, cleanup.Config{Table: "objs", Grace: time.Hour, BatchSize: 5000})
	must(b, err)
	e.exec(b, "DELETE FROM objs_review") // the live objects were reviewed long ago (see setup)
	e.exec(b, "ANALYZE")
	return refset.New(setStore), c
}

// loadChunked loads n rows with e.load, scaleChunk rows a transaction.
func loadChunked(b *testing.B, e *gcEnv, table string, cols []string, n int, row func(i int) []any) {
	b.Helper()
	for start := 0; start < n; start += scaleChunk {
		e.load(b, table, cols, min(scaleChunk, n-start), func(i int) []any { return row(start + i) })
	}
}

// BenchmarkScaleBranch: walks of the same length down block chains of each size.
func BenchmarkScaleBranch(b *testing.B) {
	walk := envInt(b, "REFSET_BENCH_WALK", 10_000)
	for _, size := range scaleSizes(b) {
		b.Run(fmt.Sprintf("blocks=%d", size), func(b *testing.B) { scaleBranch(b, size, walk) })
	}
}

func scaleBranch(b *testing.B, size, walk int) {
	if walk > size {
		b.Skipf("a walk of %d blocks on a chain of %d", walk, size)
	}
	ctx := context.Background()
	m, db, _ := bmOpen(b, onLibPQ)
	pool := db.(*postgres.DB).Pool()
	exec := func(q string) {
		b.Helper()
		_, err := pool.ExecContext(ctx, q)
		must(b, err)
	}
	start := time.Now()
	// Clean-up's triggers off while loading: a chain whose blocks were reviewed long
	// ago. The foreign keys stay checked.
	exec(`ALTER TABLE blocks DISABLE TRIGGER USER`)
	id := func(num int) string { return fmt.Sprintf("blk-%09d", num) }
	cols := []string{"header_signature", "previous_block_id", "previous_block_ref", "block_num", "batch_ids", "transaction_ids", "payload"}
	for from := 0; from < size; from += scaleChunk {
		err := copyLibPQ(ctx, pool, "blocks", cols, min(scaleChunk, size-from), func(i int) []any {
			num := from + i
			prev, ref := blockmanager.NullBlockID, any(nil)
			if num > 0 {
				prev = id(num - 1)
				ref = prev
			}
			batches, _ := blockmanager.IDs{"b-" + id(num)}.Value()
			txns, _ := blockmanager.IDs{"t-" + id(num)}.Value()
			return []any{id(num), prev, ref, int64(num), batches, txns, bmPayload}
		})
		must(b, err)
	}
	exec(`ALTER TABLE blocks ENABLE TRIGGER USER`)
	exec(`ANALYZE`)
	b.Logf("loaded a chain of %d blocks in %s", size, time.Since(start).Round(time.Second))
	tip := id(size - 1)
	b.Run(fmt.Sprintf("walk=%d", walk), func(b *testing.B) { walkBranch(b, m, tip, walk) })
}

// walkBranch times Branch reading walk blocks down from tip.
func walkBranch(b *testing.B, m *blockmanager.Manager, tip string, walk int) {
	ctx := context.Background()
	for range b.N {
		n := 0
		for blk, err := range m.Branch(ctx, tip) {
			if err != nil {
				b.Fatal(err)
			}
			sinkInt = blk.BlockNum
			if n++; n == walk {
				break
			}
		}
		if n != walk {
			b.Fatalf("walked %d blocks, want %d", n, walk)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*walk), "ns/block")
}
