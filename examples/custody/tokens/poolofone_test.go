package tokens

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPoolOfOne runs every call of a vault on one connection (PostgreSQL with
// MaxConns 1; SQLite's one writer), outside a unit of work and, for the payment and
// the balance, inside one, with the unit's context: none may wait for a second
// connection. A wait on itself ends in the deadline and fails the test.
func TestPoolOfOne(t *testing.T) {
	eachBackend(t, allBackends(), func(t *testing.T, b backend) {
		v := openVault(t, b.new(t).open(t, 1), waiting)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		_, err := v.Issue(ctx, newTx(), gbp("alice", 10), gbp("alice", 5), gbp("bob", 7))
		require.NoError(t, err, "Issue")
		tx := newTx()
		locked, err := v.Select(ctx, tx, "alice", 6, Filter{}, time.Minute)
		require.NoError(t, err, "Select")
		var sum int64
		for _, tok := range locked {
			sum += tok.Amount
		}
		_, _, err = v.Spend(ctx, tx, []Token{gbp("bob", 6), gbp("alice", sum-6)})
		require.NoError(t, err, "Spend")
		released := newTx()
		_, err = v.Select(ctx, released, "bob", 1, Filter{}, time.Minute)
		require.NoError(t, err, "Select")
		_, err = v.Release(ctx, released)
		require.NoError(t, err, "Release")
		_, _, err = v.Pay(ctx, newTx(), "bob", gbp("carol", 3))
		require.NoError(t, err, "Pay")
		_, err = v.Collect(ctx)
		require.NoError(t, err, "Collect")

		require.NoError(t, refset.InTx(ctx, v.db, func(ctx context.Context, _ refset.Tx) error {
			if _, _, err := v.Pay(ctx, newTx(), "carol", gbp("dave", 2)); err != nil {
				return err
			}
			total, _, err := v.Balance(ctx, "dave", "GBP")
			require.NoError(t, err, "Balance in the unit")
			assert.Equal(t, int64(2), total, "the unit's own payment")
			return nil
		}), "Pay and Balance in a unit of work")
		total, _, err := v.Balance(ctx, "dave", "GBP")
		require.NoError(t, err)
		assert.Equal(t, int64(2), total)

		// A payment in a unit that fails rolls back with it: it did not commit on its own.
		refused := errors.New("the deal fell through")
		err = refset.InTx(ctx, v.db, func(ctx context.Context, _ refset.Tx) error {
			if _, _, err := v.Pay(ctx, newTx(), "dave", gbp("erin", 2)); err != nil {
				return err
			}
			return refused
		})
		require.ErrorIs(t, err, refused)
		total, _, err = v.Balance(ctx, "erin", "GBP")
		require.NoError(t, err)
		assert.Zero(t, total, "the rolled-back payment left nothing")
		audit(t, v)
	})
}
