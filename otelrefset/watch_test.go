package otelrefset_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
)

// A service that closes its database and opens it again (a restart of its pool, a
// failover) watches the new collector's queue in place of the old one: every
// collection of the meter succeeds, the table keeps one series, and while no open
// database is watched it reports nothing rather than an error at each collection.
func TestWatchQueueAcrossReopen(t *testing.T) {
	testdb.Each(t, []testdb.Backend{testdb.SQLite, testdb.LibPQ}, func(t *testing.T, b testdb.Backend) {
		ctx := t.Context()
		obs, r := newObserver(t)

		where := b.New(t)
		watch := func(n int) refset.Database {
			t.Helper()
			db := where.Open(t, testdb.Options{Observer: obs})
			if n == 1 {
				require.NoError(t, refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
					_, err := tx.ExecContext(ctx, `CREATE TABLE items (id TEXT PRIMARY KEY, n BIGINT NOT NULL)`)
					return err
				}))
			}
			s, err := store.NewStore[item, string](ctx, db, store.Config{Table: "items"})
			require.NoError(t, err)
			c, err := store.NewCollector(ctx, db, cleanup.Config{Table: "items"})
			require.NoError(t, err)
			for i := range n {
				_, err := refset.New(s).Add(ctx, item{Key: string(rune('a'+n)) + string(rune('0'+i)), N: 1})
				require.NoError(t, err)
			}
			require.NoError(t, obs.WatchQueue(c))
			require.NoError(t, obs.WatchQueue(c), "watching twice")
			return db
		}
		depth := func() map[string]int64 {
			t.Helper()
			m := metrics(t, r) // fails on an error of any callback
			if m["refset.queue.depth"] == nil {
				return map[string]int64{}
			}
			return gauges(t, m["refset.queue.depth"])
		}

		first := watch(1)
		table := "table=items"
		if where.Schema != "" {
			table = "table=" + where.Schema + ".items"
		}
		assert.Equal(t, map[string]int64{table: 1}, depth())

		require.NoError(t, first.Close())
		assert.Empty(t, depth(), "a closed database's queue reports nothing")

		watch(2)
		assert.Equal(t, map[string]int64{table: 3}, depth(), "the reopened database's queue, once")
	})
}
