package blockmanager

import (
	"context"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPoolOfOne runs every documented call of the manager on a caller's pool of one
// connection, outside a unit of work and, for those that write or read, inside one
// (a plain call made with the unit's context joins it): none may wait for a second
// connection. A wait on itself ends in the deadline and fails the test.
func TestPoolOfOne(t *testing.T) {
	testdb.Each(t, testdb.All(), func(t *testing.T, b testdb.Backend) {
		m := openManager(t, b.Open(t, testdb.Options{PoolOfOne: true}), Config{})
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		main, fork := chain("m", NullBlockID, 0, 12), chain("f", "m0005", 6, 4)
		_, err := m.Put(ctx, main)
		require.NoError(t, err, "Put")
		_, err = m.Put(ctx, fork)
		require.NoError(t, err, "Put of a fork")
		got, err := m.Get(ctx, []string{"m0003", "f0007"})
		require.NoError(t, err, "Get")
		assert.Equal(t, []string{"m0003", "f0007"}, ids(got))
		n := 0
		for _, err := range m.Branch(ctx, "m0011") {
			require.NoError(t, err, "Branch")
			n++
		}
		assert.Equal(t, 12, n)
		diff, err := m.BranchDiff(ctx, "f0009", "m0011")
		require.NoError(t, err, "BranchDiff")
		assert.Len(t, diff, 4)
		common, err := m.CommonAncestor(ctx, "f0009", "m0011")
		require.NoError(t, err, "CommonAncestor")
		assert.Equal(t, "m0005", common.HeaderSignature)
		_, err = m.ContainsAnyBatches(ctx, "m0011", []string{"batch-m0004"})
		require.NoError(t, err, "ContainsAnyBatches")
		cc := m.Controller()
		require.NoError(t, cc.Commit(ctx, "m0011"), "Commit")
		_, err = cc.Head(ctx)
		require.NoError(t, err, "Head")
		_, err = cc.Forks(ctx)
		require.NoError(t, err, "Forks")
		comp := m.Completer()
		_, err = comp.Receive(ctx, chain("m", "m0012", 13, 1)[0])
		require.NoError(t, err, "Receive of a block whose predecessor is missing")
		_, _, err = comp.Pending(ctx)
		require.NoError(t, err, "Pending")
		_, err = m.Collector().Collect(ctx)
		require.NoError(t, err, "Collect")

		// Inside a unit of work, the plain calls join it.
		require.NoError(t, refset.InTx(ctx, m.Database(), func(ctx context.Context, _ refset.Tx) error {
			if _, err := m.Put(ctx, chain("m", "m0011", 12, 1)); err != nil {
				return err
			}
			found, err := m.Contains(ctx, "m0012")
			require.NoError(t, err, "Contains in the unit")
			assert.True(t, found, "the unit's own block")
			diff, err := m.BranchDiff(ctx, "m0012", "m0010")
			require.NoError(t, err, "BranchDiff in the unit")
			assert.Len(t, diff, 2)
			if err := cc.Commit(ctx, "m0012"); err != nil {
				return err
			}
			head, err := cc.Head(ctx)
			require.NoError(t, err, "Head in the unit")
			assert.Equal(t, "m0012", head)
			_, err = comp.Receive(ctx, chain("m", "m0013", 14, 1)[0])
			require.NoError(t, err, "Receive in the unit")
			return nil
		}))
		head, err := cc.Head(ctx)
		require.NoError(t, err)
		assert.Equal(t, "m0014", head)
	})
}
