package blockmanager

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// awkwardIDs are IDs that a list argument must carry as they are: each dialect
// encodes a list as one text (an array literal, a JSON array), where these mean
// something.
var awkwardIDs = []string{`quote"d`, `com,ma`, `{brace}`, `back\slash`, `NULL`, `sp ace`, `'single'`, `["json"]`, `ünï`}

// The statements the manager writes from its driver's fragments (a column tested
// against a list, the index rows written from lists) find and store awkward IDs
// as they are, on every database.
func TestListArgumentsCarryAnyID(t *testing.T) {
	eachDB(t, Config{}, func(t *testing.T, m *Manager) {
		ctx := t.Context()
		branch := make([]Block, len(awkwardIDs))
		prev := NullBlockID
		for i, id := range awkwardIDs {
			branch[i] = Block{HeaderSignature: id, PreviousBlockID: prev, BlockNum: int64(i),
				BatchIDs: IDs{"batch " + id}, TransactionIDs: IDs{"txn " + id}}
			prev = id
		}
		tip := branch[len(branch)-1].HeaderSignature
		put(t, m, branch)

		absent := []string{`quote"`, `com`, `{}`, `back\\slash`, `null`}
		stored, err := m.storedIDs(ctx, m.db.Reader(), append(append([]string{}, awkwardIDs...), absent...))
		require.NoError(t, err)
		want := make(map[string]bool)
		for _, id := range awkwardIDs {
			want[id] = true
		}
		assert.Equal(t, want, stored)

		for _, id := range awkwardIDs {
			found, err := m.ContainsAnyBatches(ctx, tip, []string{"batch " + id})
			require.NoError(t, err)
			assert.True(t, found, "batch of %s", id)
			found, err = m.ContainsAnyTransactions(ctx, tip, []string{"txn " + id})
			require.NoError(t, err)
			assert.True(t, found, "transaction of %s", id)
		}
		for _, id := range absent {
			found, err := m.ContainsAnyBatches(ctx, tip, []string{"batch " + id})
			require.NoError(t, err)
			assert.False(t, found, fmt.Sprintf("batch of %s", id))
		}
	})
}
