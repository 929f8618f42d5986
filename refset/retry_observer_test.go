package refset_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// conflictCounter is an Observer that counts what RetryConflicts tells it.
type conflictCounter struct {
	refset.NoObserver
	retried, conflicted atomic.Int64
}

func (c *conflictCounter) Retried(context.Context, error)    { c.retried.Add(1) }
func (c *conflictCounter) Conflicted(context.Context, error) { c.conflicted.Add(1) }

// Work retried by RetryConflicts is counted by the database's Observer like a unit
// of work InTx retries: each retry, and a conflict that outlasts them. A nil
// database tells nobody and still retries.
func TestRetryConflictsTellsTheObserver(t *testing.T) {
	obs := &conflictCounter{}
	db := testdb.SQLite.Open(t, testdb.Options{Observer: obs})

	conflict := fmt.Errorf("deadlock detected: %w", refset.ErrConflict)
	for _, tc := range []struct {
		name                        string
		db                          refset.Database
		conflicts                   int // runs that fail before one succeeds
		wantRetried, wantConflicted int64
	}{
		{"two conflicts, then success", db, 2, 2, 0},
		{"conflicts that outlast the retries", db, 100, 5, 1},
		{"no database", nil, 2, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := [2]int64{obs.retried.Load(), obs.conflicted.Load()}
			runs := 0
			err := refset.RetryConflicts(t.Context(), tc.db, func() error {
				runs++
				if runs <= tc.conflicts {
					return conflict
				}
				return nil
			})
			if tc.wantConflicted > 0 {
				require.ErrorIs(t, err, refset.ErrConflict)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tc.wantRetried, obs.retried.Load()-before[0], "retries told")
			assert.Equal(t, tc.wantConflicted, obs.conflicted.Load()-before[1], "conflicts told")
		})
	}
}
