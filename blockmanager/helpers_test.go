package blockmanager

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store/sqlite"
	_ "github.com/refsetdb/refset/store/sqlite/mattn" // go-sqlite3 (cgo)
	"github.com/stretchr/testify/require"
)

// eachDB runs fn as a parallel subtest per backend, with a fresh manager.
func eachDB(t *testing.T, cfg Config, fn func(t *testing.T, m *Manager)) {
	t.Helper()
	eachOf(t, testdb.All(), cfg, fn)
}

func eachOf(t *testing.T, backends []testdb.Backend, cfg Config, fn func(t *testing.T, m *Manager)) {
	t.Helper()
	testdb.Each(t, backends, func(t *testing.T, b testdb.Backend) {
		// A standby's walks wait long for it: other tests may pause its replay.
		fn(t, openManager(t, b.Open(t, testdb.Options{ReplicaWait: 2 * time.Minute}), cfg))
	})
}

func openManager(tb testing.TB, db refset.Database, cfg Config) *Manager {
	tb.Helper()
	if cfg.PageSize == 0 {
		cfg.PageSize = 7 // small pages: every walk spans several
	}
	m, err := Open(context.Background(), db, cfg)
	require.NoError(tb, err)
	m.pagePart = 2 // and every page that spans 4 heights or more is read in two parts
	return m
}

// chain makes n blocks numbered from `from`, each named prefix + number, following
// prev (NullBlockID for a chain from genesis). Each carries a batch and a transaction
// named after it.
func chain(prefix string, prev string, from int64, n int) []Block {
	out := make([]Block, n)
	for i := range n {
		num := from + int64(i)
		id := fmt.Sprintf("%s%04d", prefix, num)
		out[i] = Block{
			HeaderSignature: id, PreviousBlockID: prev, BlockNum: num,
			BatchIDs: IDs{"batch-" + id}, TransactionIDs: IDs{"txn-" + id}, Payload: []byte(id),
		}
		prev = id
	}
	return out
}

func ids(blocks []*Block) []string {
	out := make([]string, len(blocks))
	for i, b := range blocks {
		if b != nil {
			out[i] = b.HeaderSignature
		}
	}
	return out
}

// collect makes every queued block due and collects.
func collect(tb testing.TB, m *Manager) {
	tb.Helper()
	ctx := context.Background()
	past := "now() - interval '1 second'"
	if _, ok := m.db.(*sqlite.DB); ok {
		past = "0"
	}
	require.NoError(tb, refset.InTx(ctx, m.db, func(ctx context.Context, tx refset.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE blocks_review SET review_after = "+past)
		return err
	}))
	_, err := m.Collector().Collect(ctx)
	require.NoError(tb, err)
}

func count(tb testing.TB, m *Manager, q string, args ...any) int {
	tb.Helper()
	var n int
	require.NoError(tb, m.db.Reader().QueryRowContext(context.Background(), m.sql(q), args...).Scan(&n), q)
	return n
}

// put stores each branch in turn, held by holder "t", and returns the last one's
// tip.
func put(tb testing.TB, m *Manager, branches ...[]Block) (tip *refset.RefToken[string]) {
	tb.Helper()
	for _, b := range branches {
		var err error
		tip, err = m.Put(tb.Context(), b, m.Blocks().Hold("t", 0))
		require.NoError(tb, err)
	}
	return tip
}
