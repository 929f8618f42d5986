package bench

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/refsetdb/refset/blockmanager"
	"github.com/refsetdb/refset/internal/sqltext"
	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store/sqlite"
)

// The block manager benchmarks: Put beside a raw bulk insert of the same rows, and
// walks over long branches.

// rawDialect is the dialect of the hand-written SQL the raw (sqlx) side runs.
type rawDialect string

const (
	rawSQLite   rawDialect = "sqlite"
	rawPostgres rawDialect = "postgres"
)

// Rebind writes the dialect's placeholders into a statement written with ?.
func (d rawDialect) Rebind(query string) string {
	if d == rawPostgres {
		return sqltext.Dollar(query)
	}
	return query
}

func bmOpen(b *testing.B, dialect string) (*blockmanager.Manager, refset.Database, rawDialect) {
	b.Helper()
	m, db, d, _ := bmOpenRaw(b, dialect)
	return m, db, d
}

// bmOpenRaw opens a manager on a fresh database, and returns beside it the pool
// refset reads through (sqlite DB.Readers(), on postgres the pool given to
// postgres.New), where the raw walks read.
func bmOpenRaw(tb testing.TB, dialect string) (*blockmanager.Manager, refset.Database, rawDialect, *sqlx.DB) {
	tb.Helper()
	ctx := context.Background()
	var db refset.Database
	var reader *sqlx.DB
	d := rawSQLite
	if backend, ok := sqliteBackends[dialect]; !ok {
		db, reader = openPool(tb, dialect)
		d = rawPostgres
	} else {
		s := backend.Open(tb, testdb.Options{}).(*sqlite.DB)
		db, reader = s, s.Readers()
	}
	m, err := blockmanager.Open(ctx, db, blockmanager.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	return m, db, d, reader
}

// bmChain makes n blocks named prefix+number from number `from`, following prev.
func bmChain(prefix, prev string, from int64, n int) []blockmanager.Block {
	out := make([]blockmanager.Block, n)
	for i := range n {
		num := from + int64(i)
		id := fmt.Sprintf("%s%07d", prefix, num)
		out[i] = blockmanager.Block{HeaderSignature: id, PreviousBlockID: prev, BlockNum: num,
			BatchIDs: blockmanager.IDs{"b-" + id}, TransactionIDs: blockmanager.IDs{"t-" + id}, Payload: bmPayload}
		prev = id
	}
	return out
}

// rawPut inserts a branch the way a hand-written bulk loader would: multi-row inserts
// of the blocks and their batch and transaction index rows, in one transaction.
func rawPut(ctx context.Context, db refset.Database, d rawDialect, branch []blockmanager.Block) error {
	return refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
		const per = 500
		for start := 0; start < len(branch); start += per {
			chunk := branch[start:min(start+per, len(branch))]
			blocks := make([]any, 0, 7*len(chunk))
			batches := make([]any, 0, 2*len(chunk))
			txns := make([]any, 0, 2*len(chunk))
			for _, b := range chunk {
				var ref any
				if b.PreviousBlockID != blockmanager.NullBlockID {
					ref = b.PreviousBlockID
				}
				bi, _ := b.BatchIDs.Value()
				ti, _ := b.TransactionIDs.Value()
				blocks = append(blocks, b.HeaderSignature, b.PreviousBlockID, ref, b.BlockNum, bi, ti, b.Payload)
				batches = append(batches, b.BatchIDs[0], b.HeaderSignature)
				txns = append(txns, b.TransactionIDs[0], b.HeaderSignature)
			}
			for _, s := range []struct {
				sql  string
				args []any
				k    int
			}{
				{`INSERT INTO blocks (header_signature, previous_block_id, previous_block_ref, block_num, batch_ids, transaction_ids, payload) VALUES `, blocks, 7},
				{`INSERT INTO block_batches (batch_id, block_id) VALUES `, batches, 2},
				{`INSERT INTO block_transactions (transaction_id, block_id) VALUES `, txns, 2},
			} {
				row := "(" + strings.TrimSuffix(strings.Repeat("?, ", s.k), ", ") + ")"
				q := s.sql + strings.TrimSuffix(strings.Repeat(row+", ", len(s.args)/s.k), ", ")
				if _, err := tx.ExecContext(ctx, d.Rebind(q), s.args...); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// BenchmarkPut: 100,000 blocks in branches of 1,000, by Put and by a raw bulk insert.
func BenchmarkPut(b *testing.B) {
	const total, branch = 100_000, 1000
	for _, dialect := range databases {
		for _, how := range []string{"refset", "raw"} {
			b.Run(dialect+"/"+how, func(b *testing.B) {
				ctx := context.Background()
				for iter := 0; iter < b.N; iter++ {
					b.StopTimer()
					m, db, d := bmOpen(b, dialect)
					prefix := fmt.Sprintf("i%d-", iter)
					b.StartTimer()
					prev := blockmanager.NullBlockID
					for start := 0; start < total; start += branch {
						br := bmChain(prefix, prev, int64(start), branch)
						var err error
						if how == "refset" {
							_, err = m.Put(ctx, br)
						} else {
							err = rawPut(ctx, db, d, br)
						}
						if err != nil {
							b.Fatal(err)
						}
						prev = br[len(br)-1].HeaderSignature
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*total), "ns/block")
			})
		}
	}
}

// bmPayload is every benchmark block's payload: 100 bytes.
var bmPayload = make([]byte, 100)

// BenchmarkPutPaired alternates, branch by branch, a Put and a raw bulk insert of
// 1,000 blocks into the same tables, so both sides see the same machine at the same
// moment and tables of the same size; throughput-ratio is refset's throughput over
// raw's. The two take turns at going first, and every block (and batch and
// transaction) is named after its branch's turn, so the rows of each insert sort
// after every row written before it, whichever side wrote them: each side appends
// at the right end of every index. Named by side instead ("r..." and "s..."), one
// side's keys all fell in the middle of the indexes, behind the other's, where
// B-tree pages split in half, and that side paid 20 to 30 per cent more for the same
// rows; on Postgres the ratio read 0.8 or 1.3 by which side had the lower name.
func BenchmarkPutPaired(b *testing.B) {
	const total, branch = 100_000, 1000
	for _, dialect := range databases {
		b.Run(dialect, func(b *testing.B) {
			ctx := context.Background()
			var spent [2]time.Duration // refset's, raw's
			for iter := 0; iter < b.N; iter++ {
				b.StopTimer()
				m, db, d := bmOpen(b, dialect)
				// Statistics of the empty tables, which the Put then grows far past.
				analyzeDB(b, db, d == rawPostgres)
				b.StartTimer()
				tips := [2]string{blockmanager.NullBlockID, blockmanager.NullBlockID}
				for turn := range total / branch {
					for k := range 2 {
						side := (turn + k) % 2 // refset goes first on even turns
						br := bmChain(fmt.Sprintf("%05d%c-", turn, 'a'+k), tips[side], int64(turn*branch), branch)
						t0 := time.Now()
						var err error
						if side == 0 {
							_, err = m.Put(ctx, br)
						} else {
							err = rawPut(ctx, db, d, br)
						}
						if err != nil {
							b.Fatal(err)
						}
						spent[side] += time.Since(t0)
						tips[side] = br[len(br)-1].HeaderSignature
					}
				}
			}
			n := float64(b.N * total)
			b.ReportMetric(float64(spent[0].Nanoseconds())/n, "refset-ns/block")
			b.ReportMetric(float64(spent[1].Nanoseconds())/n, "raw-ns/block")
			b.ReportMetric(float64(spent[1])/float64(spent[0]), "throughput-ratio")
		})
	}
}

// The walk benchmarks. BenchmarkBranch walks 10,000 blocks from tip to genesis;
// BenchmarkBranchDiff compares two forks of 5,000 blocks each above a common base of
// 100. Each runs twice per database: stored=10k, with only the walked blocks stored
// (put by Put, in branches of 1,000), and stored=1M, the same blocks and about a
// million others in the same tables: forks off the walked branch at the heights it
// covers (100 forks of 10,000 for Branch, 200 of 5,000 for BranchDiff), the worst
// case for a walk that reads by height. The others are loaded by one bulk INSERT ...
// SELECT per 100,000 rows, not by Put, so setup takes seconds (they get no batch or
// transaction index rows, which walks do not read), and Postgres then ANALYZEs, as
// autovacuum would soon after.
//
// Each iteration does the walk once by refset and once by hand-written SQL on the
// same pool (the raw side: one recursive query, scanned by sqlx into the same Block
// structs), taking turns at going first, and reports refset-ms/walk (or /diff),
// raw-ms/walk and throughput-ratio (raw's time over refset's). One walk of each runs
// before the timer, so neither side pays for a cold cache alone.

// Branch walks: rawBranchSQL is the walk a careful developer writes by hand, one
// recursive query following previous_block_ref, newest block first.
const rawBranchSQL = `WITH RECURSIVE walk AS (
	SELECT header_signature, previous_block_id, previous_block_ref, block_num, batch_ids, transaction_ids, payload
	FROM blocks WHERE header_signature = ?
	UNION ALL
	SELECT b.header_signature, b.previous_block_id, b.previous_block_ref, b.block_num, b.batch_ids, b.transaction_ids, b.payload
	FROM walk w JOIN blocks b ON b.header_signature = w.previous_block_ref)
SELECT * FROM walk ORDER BY block_num DESC`

// rawBranchDiffSQL walks both branches in one recursive query, a pair of blocks per
// step: the higher one steps down (both, at equal heights) until the two meet at
// their common ancestor or tip's branch ends. The diff is every block of tip's side
// that was stepped from, newest first.
const rawBranchDiffSQL = `WITH RECURSIVE pair (a, a_num, a_prev, b, b_num, b_prev) AS (
	SELECT x.header_signature, x.block_num, x.previous_block_ref, y.header_signature, y.block_num, y.previous_block_ref
	FROM blocks x, blocks y WHERE x.header_signature = ? AND y.header_signature = ?
	UNION ALL
	SELECT
		CASE WHEN p.b IS NULL OR p.a_num >= p.b_num THEN x.header_signature ELSE p.a END,
		CASE WHEN p.b IS NULL OR p.a_num >= p.b_num THEN x.block_num ELSE p.a_num END,
		CASE WHEN p.b IS NULL OR p.a_num >= p.b_num THEN x.previous_block_ref ELSE p.a_prev END,
		CASE WHEN p.b_num >= p.a_num THEN y.header_signature ELSE p.b END,
		CASE WHEN p.b_num >= p.a_num THEN y.block_num ELSE p.b_num END,
		CASE WHEN p.b_num >= p.a_num THEN y.previous_block_ref ELSE p.b_prev END
	FROM pair p
	LEFT JOIN blocks x ON x.header_signature = p.a_prev AND (p.b IS NULL OR p.a_num >= p.b_num)
	LEFT JOIN blocks y ON y.header_signature = p.b_prev AND p.b_num >= p.a_num
	WHERE p.a IS NOT NULL AND (p.b IS NULL OR p.a <> p.b))
SELECT bl.header_signature, bl.previous_block_id, bl.previous_block_ref, bl.block_num, bl.batch_ids, bl.transaction_ids, bl.payload
FROM pair p JOIN blocks bl ON bl.header_signature = p.a
WHERE p.b IS NULL OR (p.a_num >= p.b_num AND p.a <> p.b)
ORDER BY bl.block_num DESC`

// walkSizes are the sub-benchmarks: how many forks of filler (each as long as the
// walked branch) are stored beside the walked blocks.
var walkSizes = []struct {
	name   string
	filler int // blocks stored beside the walked ones, about
}{
	{"stored=10k", 0},
	{"stored=1M", 1_000_000},
}

// walkBench is one walk benchmark's data on one database.
type walkBench struct {
	m      *blockmanager.Manager
	db     refset.Database
	d      rawDialect
	reader *sqlx.DB
}

// outliving is tb with its clean-ups and temporary directories owned by owner, a
// parent benchmark: Go runs a benchmark function several times with growing b.N,
// and what one run loads the next reuses.
type outliving struct {
	testing.TB
	owner testing.TB
}

func (o outliving) Cleanup(f func()) { o.owner.Cleanup(f) }
func (o outliving) TempDir() string  { return o.owner.TempDir() }

// runWalks runs walk's sub-benchmarks on every database: load stores the walked
// blocks and returns what the walk needs, filler adds the other blocks, and each
// iteration runs refset's walk and the raw one, timed apart.
//
// Each size's blocks are stored once and walked twice. First under grown
// (BenchmarkBranch/sqlite/grown/stored=1M): the tables were analyzed before the
// walked blocks came, when they held a seed chain of seedBlocks blocks and nothing
// else, and autovacuum is kept off them on Postgres, so the walks read a branch,
// segments and heights the statistics never saw, as a node's newest blocks always
// are between two autovacuum runs. Then, the tables analyzed, without grown
// (BenchmarkBranch/sqlite/stored=1M): the statistics as autovacuum leaves them. The
// seed chain stays, a thousand blocks beside the stored ones that no walk reads;
// storing a million blocks once rather than twice per database is what keeps
// scripts/bench.sh --full within a sitting.
func runWalks[S any](b *testing.B, unit string, load func(testing.TB, *walkBench) S,
	fill func(testing.TB, *walkBench, int), refsetWalk, rawWalk func(*walkBench, S) error) {
	type stored struct {
		w        *walkBench
		state    S
		analyzed bool
	}
	for _, dialect := range databases {
		b.Run(dialect, func(b *testing.B) {
			owner := b
			sizes := make([]stored, len(walkSizes))
			walkAll := func(b *testing.B, grown bool) {
				for i, size := range walkSizes {
					b.Run(size.name, func(b *testing.B) {
						s := &sizes[i]
						tb := outliving{TB: b, owner: owner}
						if s.w == nil {
							m, db, d, reader := bmOpenRaw(tb, dialect)
							s.w = &walkBench{m: m, db: db, d: d, reader: reader}
							if grown {
								s.w.seed(tb)
							}
							s.state = load(tb, s.w)
							if size.filler > 0 {
								fill(tb, s.w, size.filler)
							}
						}
						if !grown && !s.analyzed {
							s.w.analyze(tb)
							s.analyzed = true
						}
						timeWalks(b, s.w, s.state, unit, refsetWalk, rawWalk)
					})
				}
			}
			b.Run("grown", func(b *testing.B) { walkAll(b, true) })
			walkAll(b, false)
		})
	}
}

// seedBlocks is how many blocks a grown walk benchmark's tables hold when they are
// analyzed.
const seedBlocks = 1000

// seed stores a chain of seedBlocks blocks apart from the walked ones, analyzes the
// tables, and keeps autovacuum off them (Postgres), so their statistics stay those
// of the seed whatever is stored after.
func (w *walkBench) seed(tb testing.TB) {
	tb.Helper()
	putChain(tb, w.m, "s", blockmanager.NullBlockID, 0, seedBlocks)
	if w.d == rawPostgres {
		for _, table := range []string{"blocks", "block_batches", "block_transactions", "blocks_holds", "blocks_review"} {
			if _, err := w.reader.Exec(`ALTER TABLE ` + table + ` SET (autovacuum_enabled = off)`); err != nil {
				tb.Fatal(err)
			}
		}
	}
	w.analyze(tb)
}

// timeWalks runs b.N iterations of refset's walk and the raw one, taking turns at
// going first, after one of each that is not timed, and reports the time of each.
func timeWalks[S any](b *testing.B, w *walkBench, state S, unit string, refsetWalk, rawWalk func(*walkBench, S) error) {
	sides := []func(*walkBench, S) error{refsetWalk, rawWalk}
	var spent [2]time.Duration
	for i, walk := range sides { // warm up
		if err := walk(w, state); err != nil {
			b.Fatalf("side %d: %v", i, err)
		}
	}
	b.ResetTimer()
	for iter := range b.N {
		for k := range sides {
			i := (iter + k) % len(sides) // take turns at going first
			t0 := time.Now()
			if err := sides[i](w, state); err != nil {
				b.Fatal(err)
			}
			spent[i] += time.Since(t0)
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(spent[0].Microseconds())/1000/n, "refset-ms/"+unit)
	b.ReportMetric(float64(spent[1].Microseconds())/1000/n, "raw-ms/"+unit)
	b.ReportMetric(float64(spent[1])/float64(spent[0]), "throughput-ratio")
}

// putChain stores branch blocks named prefix+number from number from, following prev,
// by Put in branches of 1,000, and returns the tip.
func putChain(tb testing.TB, m *blockmanager.Manager, prefix, prev string, from int64, n int) string {
	tb.Helper()
	for start := 0; start < n; start += 1000 {
		br := bmChain(prefix, prev, from+int64(start), min(1000, n-start))
		if _, err := m.Put(context.Background(), br); err != nil {
			tb.Fatal(err)
		}
		prev = br[len(br)-1].HeaderSignature
	}
	return prev
}

// fillForks stores forks chains off root (whose number is rootNum), each of length
// blocks, with bulk INSERT ... SELECT statements of about 100,000 rows, lower heights
// first, so every block's predecessor is stored before it.
func fillForks(tb testing.TB, w *walkBench, root string, rootNum int64, forks, length int) {
	tb.Helper()
	ctx := context.Background()
	q := fillSQL[w.d]
	per := max(1, 100_000/forks)
	first := rootNum + 1
	for from := first; from < first+int64(length); from += int64(per) {
		to := min(from+int64(per)-1, first+int64(length)-1)
		err := refset.InTx(ctx, w.db, func(ctx context.Context, tx refset.Tx) error {
			_, err := tx.ExecContext(ctx, q, root, first, from, to, forks, bmPayload)
			return err
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
}

// analyze gives the walk's tables their statistics once its blocks are stored, as
// autovacuum would soon after.
func (w *walkBench) analyze(tb testing.TB) { analyzeDB(tb, w.db, w.d == rawPostgres) }

// analyzeDB analyzes db's tables (analyzeTables) in a unit of work: on SQLite
// ANALYZE writes sqlite_stat1, so it goes through the writer.
func analyzeDB(tb testing.TB, db refset.Database, pg bool) {
	tb.Helper()
	err := refset.InTx(context.Background(), db, func(ctx context.Context, tx refset.Tx) error {
		analyzeTables(tb, tx, pg)
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
}

// fillSQL inserts the blocks of heights $3 to $4 of $5 forks off $1, whose first
// blocks are at height $2, with payload $6. Fork k's block at height h is named
// f<k>-<h>, and follows root at the first height, f<k>-<h-1> above.
var fillSQL = map[rawDialect]string{
	rawPostgres: `INSERT INTO blocks (header_signature, previous_block_id, previous_block_ref, block_num, batch_ids, transaction_ids, payload)
		SELECT f.id, f.prev, f.prev, f.h, '["b-' || f.id || '"]', '["t-' || f.id || '"]', $6
		FROM (SELECT h, k, 'f' || lpad(k::text, 4, '0') || '-' || lpad(h::text, 7, '0') AS id,
			CASE WHEN h = $2 THEN $1 ELSE 'f' || lpad(k::text, 4, '0') || '-' || lpad((h - 1)::text, 7, '0') END AS prev
			FROM generate_series($3::bigint, $4::bigint) h, generate_series(1, $5::int) k) f
		ORDER BY f.h, f.k`,
	rawSQLite: `WITH RECURSIVE hs(h) AS (SELECT ?3 UNION ALL SELECT h + 1 FROM hs WHERE h < ?4),
			ks(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM ks WHERE k < ?5)
		INSERT INTO blocks (header_signature, previous_block_id, previous_block_ref, block_num, batch_ids, transaction_ids, payload)
		SELECT f.id, f.prev, f.prev, f.h, '["b-' || f.id || '"]', '["t-' || f.id || '"]', ?6
		FROM (SELECT h, k, printf('f%04d-%07d', k, h) AS id,
			CASE WHEN h = ?2 THEN ?1 ELSE printf('f%04d-%07d', k, h - 1) END AS prev
			FROM hs, ks) f
		ORDER BY f.h, f.k`,
}

// BenchmarkBranch walks 10,000 blocks from tip to genesis.
func BenchmarkBranch(b *testing.B) {
	const length = 10_000
	ctx := context.Background()
	runWalks(b, "walk",
		func(tb testing.TB, w *walkBench) string {
			return putChain(tb, w.m, "m", blockmanager.NullBlockID, 0, length)
		},
		func(tb testing.TB, w *walkBench, filler int) {
			fillForks(tb, w, bmName("m", 0), 0, filler/length, length)
		},
		func(w *walkBench, tip string) error {
			n := 0
			for _, err := range w.m.Branch(ctx, tip) {
				if err != nil {
					return err
				}
				n++
			}
			return walked(n, length)
		},
		func(w *walkBench, tip string) error {
			var blocks []blockmanager.Block
			if err := w.reader.SelectContext(ctx, &blocks, w.d.Rebind(rawBranchSQL), tip); err != nil {
				return err
			}
			return walked(len(blocks), length)
		})
}

// BenchmarkBranchDiff compares two forks of 5,000 blocks above a base of 100.
func BenchmarkBranchDiff(b *testing.B) {
	const base, length = 100, 5000
	ctx := context.Background()
	type tips struct{ a, b string }
	runWalks(b, "diff",
		func(tb testing.TB, w *walkBench) tips {
			root := putChain(tb, w.m, "g", blockmanager.NullBlockID, 0, base)
			return tips{
				a: putChain(tb, w.m, "a", root, base, length),
				b: putChain(tb, w.m, "b", root, base, length),
			}
		},
		func(tb testing.TB, w *walkBench, filler int) {
			fillForks(tb, w, bmName("g", base-1), base-1, filler/length, length)
		},
		func(w *walkBench, t tips) error {
			diff, err := w.m.BranchDiff(ctx, t.a, t.b)
			if err != nil {
				return err
			}
			return walked(len(diff), length)
		},
		func(w *walkBench, t tips) error {
			var diff []blockmanager.Block
			if err := w.reader.SelectContext(ctx, &diff, w.d.Rebind(rawBranchDiffSQL), t.a, t.b); err != nil {
				return err
			}
			return walked(len(diff), length)
		})
}

// bmName is the name bmChain gives block num of prefix's chain.
func bmName(prefix string, num int64) string { return fmt.Sprintf("%s%07d", prefix, num) }

// walked checks a walk read as many blocks as it should.
func walked(got, want int) error {
	if got != want {
		return fmt.Errorf("walked %d blocks, want %d", got, want)
	}
	return nil
}
