package sqlite

import (
	"fmt"
	"testing"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// handOvers opens a database with opts (itemsDB) and hands n items over from pending
// to heads with the commands release(i) makes,
// checking each hand-over committed.
func handOvers(t *testing.T, opts Options, n int, release func(i int) refset.Command[string]) *DB {
	t.Helper()
	ctx := t.Context()
	db, set := itemsDB(t, opts)
	acquire := refset.Exec[string](`INSERT INTO heads (k) VALUES (?)`, 1)
	for i := range n {
		id := fmt.Sprint("i", i)
		tok, err := set.Add(ctx, item{Key: id}, refset.Exec[string](`INSERT INTO pending (k) VALUES (?)`, 1))
		require.NoError(t, err)
		rel, err := tok.Release(release(i))
		require.NoError(t, err)
		acq, err := rel.Acquire(acquire)
		require.NoError(t, err)
		_, err = acq.Complete(ctx)
		require.NoError(t, err)
	}
	var left, heads int
	require.NoError(t, db.Writer().QueryRowContext(ctx, `SELECT (SELECT count(*) FROM pending), (SELECT count(*) FROM heads)`).Scan(&left, &heads))
	assert.Zero(t, left)
	assert.Equal(t, n, heads)
	return db
}

// The writer keeps the statements of Exec commands prepared once they ran twice, at most
// StatementCache of them; a negative size keeps none.
func TestExecCommandsPrepared(t *testing.T) {
	release := func(int) refset.Command[string] { return refset.Exec[string](`DELETE FROM pending WHERE k = ?`, 1) }
	db := handOvers(t, Options{}, 3, release)
	assert.Equal(t, 3, db.stmts.Len(), "the pending insert, the release, the acquire")

	db = handOvers(t, Options{Options: store.Options{StatementCache: -1}}, 3, release)
	assert.Nil(t, db.stmts)

	distinct := func(i int) refset.Command[string] { // each one twice, so prepared
		return refset.Exec[string](fmt.Sprintf(`DELETE FROM pending WHERE k = ? /* %d */`, i/2), 1)
	}
	db = handOvers(t, Options{Options: store.Options{StatementCache: 2}}, 20, distinct)
	assert.Equal(t, 2, db.stmts.Len(), "bounded")
}
