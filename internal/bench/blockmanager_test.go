package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/refsetdb/refset/blockmanager"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/schema"
	"github.com/refsetdb/refset/store/sqlite"
)

// The block manager benchmarks: Put beside a raw bulk insert of the same rows, and
// walks over long branches.

func bmOpen(b *testing.B, dialect string) (*blockmanager.Manager, refset.Database, schema.Dialect) {
	b.Helper()
	ctx := context.Background()
	var db refset.Database
	d := schema.SQLite
	if dialect != onSQLite {
		db, _ = openPool(b, dialect)
		d = schema.Postgres
	} else {
		s, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "chain.db"), sqlite.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		db = s
	}
	m, err := blockmanager.Open(ctx, db, blockmanager.Config{})
	if err != nil {
		b.Fatal(err)
	}
	return m, db, d
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
func rawPut(ctx context.Context, db refset.Database, d schema.Dialect, branch []blockmanager.Block) error {
	return refset.InTx(ctx, db, func(tx refset.Tx) error {
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

// BenchmarkBranch walks 10,000 blocks from tip to genesis; BenchmarkBranchDiff
// compares two forks of 5,000 blocks each.
func BenchmarkBranch(b *testing.B) {
	for _, dialect := range databases {
		b.Run(dialect, func(b *testing.B) {
			ctx := context.Background()
			m, _, _ := bmOpen(b, dialect)
			prev := blockmanager.NullBlockID
			for start := 0; start < 10_000; start += 1000 {
				br := bmChain("m", prev, int64(start), 1000)
				if _, err := m.Put(ctx, br); err != nil {
					b.Fatal(err)
				}
				prev = br[len(br)-1].HeaderSignature
			}
			tip := prev
			b.ResetTimer()
			for range b.N {
				n := 0
				for _, err := range m.Branch(ctx, tip) {
					if err != nil {
						b.Fatal(err)
					}
					n++
				}
				if n != 10_000 {
					b.Fatalf("walked %d blocks", n)
				}
			}
		})
	}
}

func BenchmarkBranchDiff(b *testing.B) {
	for _, dialect := range databases {
		b.Run(dialect, func(b *testing.B) {
			ctx := context.Background()
			m, _, _ := bmOpen(b, dialect)
			base := bmChain("g", blockmanager.NullBlockID, 0, 100)
			if _, err := m.Put(ctx, base); err != nil {
				b.Fatal(err)
			}
			tips := map[string]string{}
			for _, fork := range []string{"a", "b"} {
				prev := base[len(base)-1].HeaderSignature
				for start := 100; start < 5100; start += 1000 {
					br := bmChain(fork, prev, int64(start), 1000)
					if _, err := m.Put(ctx, br); err != nil {
						b.Fatal(err)
					}
					prev = br[len(br)-1].HeaderSignature
				}
				tips[fork] = prev
			}
			b.ResetTimer()
			for range b.N {
				diff, err := m.BranchDiff(ctx, tips["a"], tips["b"])
				if err != nil {
					b.Fatal(err)
				}
				if len(diff) != 5000 {
					b.Fatalf("diff of %d blocks", len(diff))
				}
			}
		})
	}
}

// bmPayload is every benchmark block's payload: 100 bytes.
var bmPayload = make([]byte, 100)

// BenchmarkPutPaired alternates, branch by branch, a Put and a raw bulk insert of
// 1,000 blocks into the same tables, so both sides see the same machine at the same
// moment and tables of the same size; throughput-ratio is refset's throughput over
// raw's.
func BenchmarkPutPaired(b *testing.B) {
	const total, branch = 100_000, 1000
	for _, dialect := range databases {
		b.Run(dialect, func(b *testing.B) {
			ctx := context.Background()
			var refsetTime, rawTime time.Duration
			for iter := 0; iter < b.N; iter++ {
				b.StopTimer()
				m, db, d := bmOpen(b, dialect)
				b.StartTimer()
				prevR, prevS := blockmanager.NullBlockID, blockmanager.NullBlockID
				for start := 0; start < total; start += branch {
					r := bmChain("r", prevR, int64(start), branch)
					s := bmChain("s", prevS, int64(start), branch)
					t0 := time.Now()
					if _, err := m.Put(ctx, r); err != nil {
						b.Fatal(err)
					}
					t1 := time.Now()
					if err := rawPut(ctx, db, d, s); err != nil {
						b.Fatal(err)
					}
					refsetTime += t1.Sub(t0)
					rawTime += time.Since(t1)
					prevR, prevS = r[len(r)-1].HeaderSignature, s[len(s)-1].HeaderSignature
				}
			}
			n := float64(b.N * total)
			b.ReportMetric(float64(refsetTime.Nanoseconds())/n, "refset-ns/block")
			b.ReportMetric(float64(rawTime.Nanoseconds())/n, "raw-ns/block")
			b.ReportMetric(float64(rawTime)/float64(refsetTime), "throughput-ratio")
		})
	}
}
